package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"
	yaml "go.yaml.in/yaml/v4"
)

// settings are read from, in order of precedence: flags, KILN_* environment
// variables (--data-dir = KILN_DATA_DIR), the --config file (YAML or TOML,
// keys named like the flags), and the defaults.
type settings struct {
	cmd            command
	fs             *flag.FlagSet
	config         string
	stdout, stderr io.Writer
}

// command describes a command for its help.
type command struct {
	synopsis string // "kiln admin token revoke ID [flags]": positional arguments named
	about    string // what it does, one short paragraph
}

// newSettings makes the flag set of cmd. Help goes to stdout when asked
// for (-h), to stderr with a mistake.
func newSettings(cmd command, stdout, stderr io.Writer) *settings {
	s := &settings{cmd: cmd, fs: flag.NewFlagSet(cmd.synopsis, flag.ContinueOnError), stdout: stdout, stderr: stderr}
	// The flag package's own messages are replaced by help (below) and
	// the error, which main prints once.
	s.fs.SetOutput(io.Discard)
	s.fs.Usage = func() {}
	s.fs.StringVar(&s.config, "config", "", "optional YAML or TOML file of settings (keys named like the flags)")
	return s
}

// printHelp writes a command's synopsis, what it does and its flags.
func printHelp(w io.Writer, cmd command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", cmd.synopsis, cmd.about)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

func printEnvNote(w io.Writer) {
	fmt.Fprint(w, "\nEvery flag may also be set as a KILN_* environment variable (--data-dir =\nKILN_DATA_DIR) or as a key of the --config file.\n")
}

func envName(flagName string) string {
	return "KILN_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse applies flags (which may stand before, between or after the
// positional arguments), then fills every flag not given on the command line
// from the environment, then from the config file. It returns the
// positional arguments.
func (s *settings) parse(args []string) ([]string, error) {
	var positional []string
	for {
		if err := s.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printHelp(s.stdout, s.cmd, s.fs)
				printEnvNote(s.stdout)
				return nil, err
			}
			printHelp(s.stderr, s.cmd, s.fs)
			return nil, usageError{err.Error()}
		}
		if s.fs.NArg() == 0 {
			break
		}
		positional = append(positional, s.fs.Arg(0))
		args = s.fs.Args()[1:]
	}
	return positional, s.fill()
}

func (s *settings) fill() error {
	given := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["config"] {
		if v, ok := os.LookupEnv(envName("config")); ok {
			s.config = v
		}
	}
	var file map[string]any
	if s.config != "" {
		var err error
		if file, err = readConfigFile(s.config); err != nil {
			return err
		}
		for k := range file {
			if k == "config" || s.fs.Lookup(k) == nil {
				return usageError{fmt.Sprintf("config file %s: unknown setting %q", s.config, k)}
			}
		}
	}
	var errs []error
	s.fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || f.Name == "config" {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			for _, one := range configValues(v) {
				if err := f.Value.Set(one); err != nil {
					errs = append(errs, fmt.Errorf("config file %s: %s: %w", s.config, f.Name, err))
				}
			}
		}
	})
	return errors.Join(errs...)
}

// configValues turns a config file value into flag strings; a list sets a
// repeatable flag once per item.
func configValues(v any) []string {
	if list, ok := v.([]any); ok {
		out := make([]string, 0, len(list))
		for _, item := range list {
			out = append(out, fmt.Sprint(item))
		}
		return out
	}
	return []string{fmt.Sprint(v)}
}

func readConfigFile(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	out := map[string]any{}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".toml":
		if _, err := toml.Decode(string(data), &out); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
	case ".yaml", ".yml":
		if err := yaml.Unmarshal(data, &out); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
	default:
		return nil, fmt.Errorf("config file %s: name must end in .yaml, .yml or .toml", path)
	}
	return out, nil
}

// listFlag is a repeatable flag; one value may also hold several separated
// by commas (the environment form: KILN_PULL_ALLOW_CIDR=a,b).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		if p := strings.TrimSpace(part); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}
