// Package ignore decides which entries a snapshot leaves out, from the
// request's "ignore" text in gitignore syntax: one pattern a line,
// applied relative to the server root, as if it were the only .gitignore
// of a repository and sat at its root. It is pure: it never reads a
// file (no nested .gitignore, no info/exclude, no core.excludesFile) and
// never touches the tree; what it keeps between calls (the DFA's cache)
// never changes an answer.
//
// The answer for every path is git's, `git check-ignore --no-index` on
// such a repository: the last matching pattern decides, "!" re-includes,
// a trailing "/" matches directories only, a "/" at the start or in the
// middle anchors the pattern to the root, and a path under an excluded
// directory stays excluded whatever later negations say. Match checks a
// path's parent directories itself, so callers that do not walk get that
// answer too; the snapshot walker skips an excluded directory whole.
// Matching is byte-wise and case-sensitive ("?" is one byte, not one
// rune; core.ignoreCase is never applied), classes such as [[:space:]]
// are git's own ASCII tables, a UTF-8 BOM and a CR before LF are
// dropped, and patterns git can never match (an unclosed "[", an
// unknown [:class:], a trailing "\") match nothing here either.
//
// Decisions:
//   - Our own matcher, not a library. go-git v5.19.3's
//     plumbing/format/gitignore diverges from git (its [!…] classes are
//     reversed, go-git#2006; a re-include inside an un-ignored directory,
//     go-git#2112), and importing it for one file adds 5 modules to
//     go.mod (go-git, go-billy, gcfg, go-context, warnings.v0), grows
//     `go list -m all` from 170 to 194 modules, links 13 more packages
//     (a git-config parser among them) and adds 128 KiB to cmd/kiln
//     (34,080,938 → 34,209,317 bytes, measured 2026-11-23).
//     github.com/git-pkgs/gitignore is not served by the module proxy,
//     and research/libraries.md §11 found it diverging in the same 12
//     cases. Ours is about 950 lines, written from git's dir.c and
//     wildmatch.c.
//   - All patterns are compiled into one bit-parallel NFA (nfa.go):
//     each pattern a run of states, a set of states a bitset, a step
//     over a byte a few word operations per 64 states. A path is one
//     pass, whatever the patterns: no backtracking (git's dowild
//     backtracks and relies on an "abort" shortcut), no pass per
//     pattern, and no pass per parent directory, since the parents are
//     prefixes of the path (each is decided at the "/" after it, by the
//     highest accepting state: the last matching pattern). A step costs
//     O((len(text) + patterns) / 64): up to a thousand word operations
//     a byte for a text of 64 KiB.
//   - So Match runs that NFA as a lazy DFA (dfa.go, RE2's approach):
//     each set of NFA states met becomes a state with a transition a
//     class of bytes, built the first time a path needs it and kept in
//     the Matcher (one lock around each Match), so a byte whose
//     transition is known costs one lookup, whatever the text. A walk
//     asks about every entry by its whole path: the states of its
//     parents are known by then, and a tree's paths go through few
//     states. The cache is bounded (2 MiB a Matcher): full, it is
//     emptied if it answered 10 bytes per state it built, else the path
//     goes on on the NFA alone and the cache is kept. The worst case is
//     the NFA's, O(len(path) × (len(text) + patterns) / 64), when the
//     paths keep bringing sets never seen, more than the cache holds
//     (long runs of "*" or "**/" a path advances through a state a
//     byte); the first path of a Matcher costs about what the NFA costs.
//     BenchmarkMatch, BenchmarkMatchCold and BenchmarkWalk have hostile
//     texts; TestMatchWorkBounded counts the NFA's steps of a walk.
//   - Parse refuses what a request should never carry, though git would
//     read it: more than 64 KiB, more than 10,000 patterns, a NUL byte,
//     invalid UTF-8. The *ParseError says which line.
//   - git itself is the test oracle: conformance_test.go runs
//     `git check-ignore --no-index --stdin` over a corpus of ignore texts
//     (hand-picked edge cases and generated combinations) and a tree of
//     files and directories made on disk, and fails on any divergence
//     (none with git 2.39.5); it skips, saying so, only where git is
//     missing. gitref_test.go is a
//     statement-for-statement port of git's code, checked against git by
//     the same test, that the fuzz test compares Match with.
//
// Deliberate divergences from git: none in matching. Input git accepts
// but Parse refuses is listed above; rel must be as Match documents
// (git never asks about "", "/a" or "a//b", and neither should callers).
package ignore
