package testserver

import (
	"maps"
	"testing"
)

func TestParseProperties(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]string
	}{
		{"vanilla", "#Minecraft server properties\n#Mon Jan 01 00:00:00 UTC 2024\nserver-port=25565\nmotd=A Minecraft Server\nmax-players=20\n",
			map[string]string{"server-port": "25565", "motd": "A Minecraft Server", "max-players": "20"}},
		{"empty value", "motd=\n", map[string]string{"motd": ""}},
		{"colon and spaces", "  motd : hello  world\n", map[string]string{"motd": "hello  world"}},
		{"space separator", "motd hello\n", map[string]string{"motd": "hello"}},
		{"bang comment", "! comment\nkey=v\n", map[string]string{"key": "v"}},
		{"crlf", "a=1\r\nb=2\r\n", map[string]string{"a": "1", "b": "2"}},
		{"unicode escape", `motd=\u00A7aGreen`, map[string]string{"motd": "§aGreen"}},
		{"surrogate pair escape", `motd=\uD83D\uDE00`, map[string]string{"motd": "😀"}},
		{"raw utf-8", "motd=§aGrün\n", map[string]string{"motd": "§aGrün"}},
		{"escaped separator in key", `a\=b=c`, map[string]string{"a=b": "c"}},
		{"escapes", `motd=tab\there\:x\\y`, map[string]string{"motd": "tab\there:x\\y"}},
		{"continuation", "motd=one \\\n    two\n", map[string]string{"motd": "one two"}},
		{"escaped backslash is no continuation", "a=x\\\\\nb=y\n", map[string]string{"a": `x\`, "b": "y"}},
		{"later key wins", "a=1\na=2\n", map[string]string{"a": "2"}},
		{"no trailing newline", "a=1", map[string]string{"a": "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProperties([]byte(tt.in))
			if err != nil || !maps.Equal(got, tt.want) {
				t.Errorf("parseProperties(%q) = %q, %v, want %q, nil", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParsePropertiesErrors(t *testing.T) {
	for _, in := range []string{`motd=\u12`, `motd=\uzzzz`, "motd=\xff\n"} {
		if got, err := parseProperties([]byte(in)); err == nil {
			t.Errorf("parseProperties(%q) = %q, nil, want an error", in, got)
		}
	}
}

func FuzzParseProperties(f *testing.F) {
	for _, s := range []string{"server-port=25565\nmotd=A Minecraft Server\n", `a\=b=\u00A7\uD83D\uDE00`, "a=\\\n", "\\", `k=\u`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		_, _ = parseProperties([]byte(in))
	})
}
