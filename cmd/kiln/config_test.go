package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSettingsPrecedence(t *testing.T) {
	for _, k := range []string{"KILN_ADDR", "KILN_DATA_DIR", "KILN_RATE_LIMIT", "KILN_DEV", "KILN_CONFIG", "KILN_LOG_LEVEL", "KILN_DATABASE_URL", "KILN_PUBLIC_HOST", "KILN_LOG_FORMAT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	dir := t.TempDir()
	yamlFile := filepath.Join(dir, "kiln.yaml")
	os.WriteFile(yamlFile, []byte("addr: 127.0.0.1:9000\ndata-dir: /from/file\nrate-limit: 7\ndev: true\nlog-level: warn\n"), 0o600)
	tomlFile := filepath.Join(dir, "kiln.toml")
	os.WriteFile(tomlFile, []byte("addr = \"127.0.0.1:9001\"\nrate-limit = 8\n"), 0o600)

	// Defaults.
	c, err := parseServe(nil, io.Discard, io.Discard)
	if err != nil || c.Addr != "127.0.0.1:8080" || c.DataDir != "./kiln-data" || c.RateLimit != 100 || c.Dev || c.DatabaseURL != "" {
		t.Fatalf("defaults = %+v, %v", c, err)
	}
	// File fills what flags and env leave.
	c, err = parseServe([]string{"--config", yamlFile}, io.Discard, io.Discard)
	if err != nil || c.Addr != "127.0.0.1:9000" || c.DataDir != "/from/file" || c.RateLimit != 7 || !c.Dev || c.LogLevel != "warn" {
		t.Fatalf("yaml file = %+v, %v", c, err)
	}
	c, err = parseServe([]string{"--config", tomlFile}, io.Discard, io.Discard)
	if err != nil || c.Addr != "127.0.0.1:9001" || c.RateLimit != 8 {
		t.Fatalf("toml file = %+v, %v", c, err)
	}
	// Env beats the file; flags beat env.
	t.Setenv("KILN_RATE_LIMIT", "9")
	t.Setenv("KILN_DATA_DIR", "/from/env")
	t.Setenv("KILN_CONFIG", yamlFile)
	c, err = parseServe([]string{"--data-dir", "/from/flag"}, io.Discard, io.Discard)
	if err != nil || c.RateLimit != 9 || c.DataDir != "/from/flag" || c.Addr != "127.0.0.1:9000" {
		t.Fatalf("precedence = %+v, %v; want rate 9 (env), dir /from/flag (flag), addr from file", c, err)
	}
	// Bad values and unknown keys are refused with the source named.
	t.Setenv("KILN_RATE_LIMIT", "lots")
	if _, err := parseServe(nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "KILN_RATE_LIMIT") {
		t.Errorf("bad env value: %v", err)
	}
	os.Unsetenv("KILN_RATE_LIMIT")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("adress: x\n"), 0o600)
	if _, err := parseServe([]string{"--config", bad}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), `unknown setting "adress"`) {
		t.Errorf("unknown key: %v", err)
	}
	if _, err := parseServe([]string{"--config", filepath.Join(dir, "x.ini")}, io.Discard, io.Discard); err == nil {
		t.Error("a .ini config was accepted")
	}
}

// TestRestoreWriterWaitFlag: --restore-writer-wait reaches the snapshot
// service's option; 60 s by default, 1s to 1h accepted.
func TestRestoreWriterWaitFlag(t *testing.T) {
	c, err := parseServe(nil, io.Discard, io.Discard)
	if err != nil || c.RestoreWriterWait != time.Minute {
		t.Fatalf("default = %v, %v; want 1m0s", c.RestoreWriterWait, err)
	}
	c, err = parseServe([]string{"--restore-writer-wait", "5m"}, io.Discard, io.Discard)
	if err != nil || c.RestoreWriterWait != 5*time.Minute {
		t.Fatalf("--restore-writer-wait 5m = %v, %v", c.RestoreWriterWait, err)
	}
	for _, bad := range []string{"0s", "500ms", "2h", "-1m", "soon"} {
		if _, err := parseServe([]string{"--restore-writer-wait", bad}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "restore-writer-wait") {
			t.Errorf("--restore-writer-wait %s: %v, want refused", bad, err)
		}
	}
}

func TestJavaHomeFlag(t *testing.T) {
	t.Setenv("KILN_JAVA_HOME", "")
	c, err := parseServe([]string{"--java-home", "17=/usr/lib/jvm/java-17-openjdk-amd64", "--java-home", "25=/opt/jdk-25/,8=/opt/jdk8"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{17: "/usr/lib/jvm/java-17-openjdk-amd64", 25: "/opt/jdk-25", 8: "/opt/jdk8"}
	if len(c.javaHomes) != len(want) {
		t.Fatalf("javaHomes = %v, want %v", c.javaHomes, want)
	}
	for k, v := range want {
		if c.javaHomes[k] != v {
			t.Errorf("javaHomes = %v, want %v", c.javaHomes, want)
		}
	}
}
