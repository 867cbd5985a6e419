package validate

import (
	"fmt"
	"strings"
)

// Issue is one broken rule: where (a dotted path into the input) and what.
type Issue struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error reports every issue found in one input. Its message is the first
// issue, so a log line or an error body reads as a sentence.
type Error struct {
	Issues []Issue
}

func (e *Error) Error() string {
	switch len(e.Issues) {
	case 0:
		return "invalid input"
	case 1:
		return issueSentence(e.Issues[0])
	default:
		return fmt.Sprintf("%s (and %d more issues)", issueSentence(e.Issues[0]), len(e.Issues)-1)
	}
}

func issueSentence(i Issue) string {
	if i.Path == "" {
		return i.Message
	}
	return i.Path + ": " + i.Message
}

// Errorf returns an *Error with a single issue.
func Errorf(path, format string, args ...any) *Error {
	return &Error{Issues: []Issue{{Path: path, Message: fmt.Sprintf(format, args...)}}}
}

// Collector gathers issues while a value is checked field by field.
// The zero value is ready to use.
type Collector struct {
	issues []Issue
}

// Add records an issue at path.
func (c *Collector) Add(path, format string, args ...any) {
	c.issues = append(c.issues, Issue{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Err returns nil when nothing was added, else an *Error with every issue.
func (c *Collector) Err() error {
	if len(c.issues) == 0 {
		return nil
	}
	return &Error{Issues: c.issues}
}

// Join builds a dotted path from parts, skipping empty ones; a part that
// starts with "[" (an index) is appended without a dot.
func Join(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 && !strings.HasPrefix(p, "[") {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}
