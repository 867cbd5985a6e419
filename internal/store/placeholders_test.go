package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var placeholderRE = regexp.MustCompile(`\$([0-9]+)`)

// TestPlaceholdersInOrder enforces the rule of doc.go on every query in
// the repository: in each SQL string (adjacent literals joined by +
// counted as one), the $N placeholders appear for the first time in the
// order 1, 2, 3…, since SQLite binds $N as a named parameter in order of
// first appearance and would bind $2-before-$1 wrongly, silently.
func TestPlaceholdersInOrder(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	for _, top := range []string{"../../internal", "../../cmd"} {
		err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
				return err
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				var s string
				switch e := n.(type) {
				case *ast.BinaryExpr:
					if e.Op != token.ADD {
						return true
					}
					s = joinLiterals(e)
				case *ast.BasicLit:
					if e.Kind != token.STRING {
						return true
					}
					s, _ = strconv.Unquote(e.Value)
				default:
					return true
				}
				if !placeholderRE.MatchString(s) || !looksLikeSQL(s) {
					return false
				}
				checked++
				next := 1
				seen := map[int]bool{}
				for _, m := range placeholderRE.FindAllStringSubmatch(s, -1) {
					k, _ := strconv.Atoi(m[1])
					if seen[k] {
						continue
					}
					if k != next {
						t.Errorf("%s: $%d appears before $%d in %q", fset.Position(n.Pos()), k, next, s)
						break
					}
					seen[k] = true
					next++
				}
				return false // a + chain was checked whole
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 50 {
		t.Errorf("only %d SQL strings with placeholders found: the scan is broken", checked)
	}
}

// joinLiterals concatenates the string literals of a + chain; other
// operands (a column list constant) count as nothing.
func joinLiterals(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.BinaryExpr:
		if x.Op == token.ADD {
			return joinLiterals(x.X) + joinLiterals(x.Y)
		}
	case *ast.BasicLit:
		if x.Kind == token.STRING {
			s, _ := strconv.Unquote(x.Value)
			return s
		}
	case *ast.ParenExpr:
		return joinLiterals(x.X)
	}
	return " "
}

func looksLikeSQL(s string) bool {
	u := strings.ToUpper(s)
	for _, kw := range []string{"SELECT ", "INSERT ", "UPDATE ", "DELETE ", " WHERE ", " SET ", "VALUES"} {
		if strings.Contains(u, kw) {
			return true
		}
	}
	return false
}
