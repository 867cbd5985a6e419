package testserver

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// parseProperties reads a server.properties file, which is a Java
// .properties file: key=value or key: value or "key value" lines, # and !
// comments, backslash escapes (\t \n \r \f \uXXXX, any other character
// stands for itself) and a trailing backslash continuing a line. A later
// key wins, as in java.util.Properties.
func parseProperties(data []byte) (map[string]string, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("not UTF-8")
	}
	props := map[string]string{}
	lines := strings.Split(strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		lineNo := i + 1
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		// Join continuation lines: an odd number of trailing backslashes.
		for continues(line) && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(lines[i], " \t\f")
		}
		if continues(line) {
			line = line[:len(line)-1]
		}
		key, value, err := splitProperty(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		props[key] = value
	}
	return props, nil
}

func continues(line string) bool {
	n := 0
	for i := len(line) - 1; i >= 0 && line[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// splitProperty splits a logical line at the first unescaped '=', ':' or
// whitespace and unescapes both halves.
func splitProperty(line string) (key, value string, err error) {
	end := len(line)
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == '\\' {
			i++
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			end = i
			break
		}
	}
	rest := strings.TrimLeft(line[end:], " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	if key, err = unescape(line[:end]); err != nil {
		return "", "", err
	}
	if value, err = unescape(rest); err != nil {
		return "", "", fmt.Errorf("%s: %w", key, err)
	}
	return key, value, nil
}

func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 > len(s) {
				return "", fmt.Errorf(`malformed \uxxxx escape`)
			}
			u, err := strconv.ParseUint(s[i+1:i+5], 16, 16)
			if err != nil {
				return "", fmt.Errorf(`malformed \uxxxx escape %q`, s[i-1:i+5])
			}
			i += 4
			// A surrogate pair arrives as two escapes.
			if u >= 0xD800 && u < 0xDC00 && i+7 <= len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if lo, err := strconv.ParseUint(s[i+3:i+7], 16, 16); err == nil && lo >= 0xDC00 && lo < 0xE000 {
					b.WriteRune(rune((u-0xD800)<<10|(lo-0xDC00)) + 0x10000)
					i += 6
					continue
				}
			}
			b.WriteRune(rune(u))
		default:
			// Includes multi-byte UTF-8: its first byte is copied here and
			// the rest by the loop.
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
