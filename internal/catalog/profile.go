package catalog

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/kilnhq/kiln/internal/validate"
)

// Category says what a profile runs: a game server or a proxy in front of
// game servers.
type Category string

// Categories of profiles.
const (
	Server Category = "server"
	Proxy  Category = "proxy"
)

// Installer kinds: which upstream an installer fetches from. The install
// package implements one installer per kind.
const (
	InstallFill       = "fill"       // PaperMC Fill v3: paper, folia, velocity, waterfall
	InstallPurpur     = "purpur"     // api.purpurmc.org v2
	InstallMojang     = "mojang"     // piston-meta: vanilla
	InstallFabric     = "fabric"     // meta.fabricmc.net v2 (+ Mojang for the vanilla jar)
	InstallQuilt      = "quilt"      // meta.quiltmc.org v3 + quilt-installer, run with java (+ Mojang)
	InstallForge      = "forge"      // maven.minecraftforge.net installer, run with java
	InstallNeoForge   = "neoforge"   // maven.neoforged.net installer, run with java
	InstallBungeeCord = "bungeecord" // ci.md-5.net Jenkins
	InstallTestServer = "kiln-test"  // nothing to download: `kiln testserver`
	InstallCustom     = "custom"     // a jar from the user's JAR_URL, verified against their JAR_SHA256
)

// Listen kinds: the file where a software reads its listen address (and,
// for server.properties, the keys of its environment variables).
const (
	ListenProperties = "properties" // server.properties: server-ip, server-port
	ListenVelocity   = "velocity"   // velocity.toml: bind
	ListenBungeeCord = "bungeecord" // config.yml: listeners[0].host
)

// Platform variables are the placeholders a start command may use besides
// the profile's own environment variables. The caller supplies them to
// Command.
const (
	VarServerMemory   = "SERVER_MEMORY"    // heap in MiB (-Xms/-Xmx), a positive integer
	VarServerPort     = "SERVER_PORT"      // game (or proxy) port
	VarServerJar      = "SERVER_JAR"       // jar to run, relative to the root (Result.Jar)
	VarServerArgsFile = "SERVER_ARGS_FILE" // JVM args file, relative to the root (Result.ArgsFile)
	VarJava           = "JAVA"             // path of the java binary of the chosen major version
	VarKilnBin        = "KILN_BIN"         // path of the kiln binary (kiln-test, kiln-test-proxy)
)

// platformVars lists the platform variables; Load refuses a profile whose
// environment variables reuse one of these names.
var platformVars = []string{VarServerMemory, VarServerPort, VarServerJar, VarServerArgsFile, VarJava, VarKilnBin}

// ErrUnresolved is returned by Command when a placeholder has no value: the
// caller did not pass it and the profile gives no default.
var ErrUnresolved = errors.New("unresolved placeholder")

// Profile is one installable server software: the seed SoftwareProfile
// fields (api.md, seed-api.md §2.1) plus what the platform needs to install,
// start and stop it.
type Profile struct {
	ID                   int           `json:"id" yaml:"id"`
	Name                 string        `json:"name" yaml:"name"`
	Type                 string        `json:"type" yaml:"type"`
	Description          string        `json:"description" yaml:"description"`
	DockerImages         []ImageChoice `json:"docker_images" yaml:"docker_images"`
	EnvironmentVariables []EnvVar      `json:"environment_variables" yaml:"environment_variables"`

	Category Category `json:"category" yaml:"category"`
	// Installer says which upstream provides the software.
	Installer InstallerSpec `json:"installer" yaml:"installer"`
	// VersionVar is the environment variable naming the version to install
	// when the server's own version field is empty ("latest" by default).
	VersionVar string `json:"version_var,omitempty" yaml:"version_var"`
	// Java is how the Java major version follows from the game version.
	Java JavaRule `json:"java" yaml:"java"`
	// Start is the start command: an argv template with ${VAR} placeholders.
	Start []string `json:"start" yaml:"start"`
	// StartArgsFile, when set, is used instead of Start when the installer
	// left a JVM args file rather than a jar (Forge 1.17+).
	StartArgsFile []string `json:"start_args_file,omitempty" yaml:"start_args_file"`
	// LargeHeap swaps some Start elements when the heap is large.
	LargeHeap *HeapRule `json:"large_heap,omitempty" yaml:"large_heap"`
	// Include names shared parts (profiles/include/<name>.yaml) whose
	// environment variables are appended to the profile's own and whose
	// JVM flag set, if any, becomes JVMFlags.
	Include []string `json:"include,omitempty" yaml:"include"`
	// JVMFlags is the flag set an include gives the profile (Aikar's
	// flags): the start element ${JVM_FLAGS} expands to its flags, or to
	// nothing when the server opts out.
	JVMFlags *FlagSet `json:"jvm_flags,omitempty" yaml:"-"`
	// StopCommand is the console line that stops the software cleanly.
	StopCommand string `json:"stop_command" yaml:"stop_command"`
	// Port is the default port of the software.
	Port int `json:"port" yaml:"port"`
	// PluginDir is where plugins or mods go, relative to the root: "plugins",
	// "mods", or empty when the software loads neither (vanilla).
	PluginDir string `json:"plugin_dir" yaml:"plugin_dir"`
	// Listen says where the software reads its listen address, which Kiln
	// writes before every start (Listen* constants).
	Listen string `json:"listen" yaml:"listen"`
	// Dev marks a profile listed only in development mode (kiln-test,
	// kiln-test-proxy).
	Dev bool `json:"-" yaml:"dev"`
}

// ImageChoice is one container image a profile can run in.
type ImageChoice struct {
	Label string `json:"label" yaml:"label"`
	Value string `json:"value" yaml:"value"`
	// Java is the Java major version inside the image; 0 when the image
	// carries no Java (the kiln test server).
	Java int `json:"java,omitempty" yaml:"java"`
}

// EnvVar is one environment variable a profile understands.
type EnvVar struct {
	Key         string `json:"key" yaml:"key"`
	Title       string `json:"title" yaml:"title"`
	Description string `json:"description" yaml:"description"`
	// Default is a string, a number (int or float64), a bool or nil.
	Default  any  `json:"default" yaml:"default"`
	Optional bool `json:"optional" yaml:"optional"`
	// Property is the server.properties key the variable sets, if any.
	Property string `json:"property,omitempty" yaml:"property"`
	// Type is the kind of value (Type* constants); empty means the kind of
	// the default (a bool default is boolean, an int integer, a float
	// number), else string.
	Type string `json:"type,omitempty" yaml:"type"`
	// Enum, when set, lists every value the variable accepts.
	Enum []string `json:"enum,omitempty" yaml:"enum"`
	// Min and Max bound an integer variable.
	Min *int `json:"min,omitempty" yaml:"min"`
	Max *int `json:"max,omitempty" yaml:"max"`
	// Requires names a variable that must be set (non-empty) when this
	// boolean variable is true (ENABLE_RCON needs RCON_PASSWORD).
	Requires string `json:"requires,omitempty" yaml:"requires"`
	// Secret marks a value Kiln never logs and never passes to the
	// software's process environment (RCON_PASSWORD: the software reads it
	// from server.properties).
	Secret bool `json:"secret,omitempty" yaml:"secret"`
}

// Variable types (EnvVar.Type).
const (
	TypeString  = "string"
	TypeBoolean = "boolean"
	TypeInteger = "integer"
	TypeNumber  = "number"
	TypePlayers = "players" // comma-separated player names, each optionally name:uuid (ParsePlayers)
	TypeURL     = "url"     // an absolute https URL without user info (CheckURL)
	TypeSHA256  = "sha256"  // 64 hex digits
)

// Kind is the type of v's values: Type, else the kind of the default.
func (v EnvVar) Kind() string {
	if v.Type != "" {
		return v.Type
	}
	switch v.Default.(type) {
	case bool:
		return TypeBoolean
	case int:
		return TypeInteger
	case float64:
		return TypeNumber
	}
	return TypeString
}

// check returns why val is not a value of v, or "".
func (v EnvVar) check(val string) string {
	if strings.ContainsFunc(val, isControl) {
		return "must not contain control characters"
	}
	switch v.Kind() {
	case TypeBoolean:
		if val != "true" && val != "false" {
			return "must be true or false"
		}
	case TypeInteger:
		n, err := strconv.Atoi(val)
		if err != nil {
			return "must be an integer"
		}
		if v.Min != nil && n < *v.Min || v.Max != nil && n > *v.Max {
			switch {
			case v.Max == nil:
				return fmt.Sprintf("must be at least %d", *v.Min)
			case v.Min == nil:
				return fmt.Sprintf("must be at most %d", *v.Max)
			}
			return fmt.Sprintf("must be between %d and %d", *v.Min, *v.Max)
		}
	case TypeNumber:
		if _, err := strconv.ParseFloat(val, 64); err != nil {
			return "must be a number"
		}
	case TypePlayers:
		if _, err := ParsePlayers(val); err != nil {
			return err.Error()
		}
	case TypeURL:
		if err := CheckURL(val); err != nil {
			return err.Error()
		}
	case TypeSHA256:
		if len(val) != 64 || strings.Trim(strings.ToLower(val), "0123456789abcdef") != "" {
			return "must be a SHA-256: 64 hexadecimal digits"
		}
	}
	if len(v.Enum) > 0 && !slices.Contains(v.Enum, val) {
		return "must be one of " + strings.Join(v.Enum, ", ")
	}
	return ""
}

// CheckURL returns why s cannot be a download URL a user gives: it must
// be an absolute https URL with a host, without user info or fragment,
// of at most 2048 bytes. Where it may connect is checked when it is
// fetched (the SSRF guard).
func CheckURL(s string) error {
	if len(s) > 2048 {
		return errors.New("must be a URL of at most 2048 bytes")
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return errors.New("must be an absolute https URL without user info or fragment")
	}
	return nil
}

// FlagSet is a named list of JVM flags a profile includes (Aikar's
// flags), dropped when the server sets OptOut to false.
type FlagSet struct {
	Name string `json:"name" yaml:"name"`
	// OptOut is the boolean variable that keeps the flags when true (its
	// default) and drops them when false (USE_AIKAR_FLAGS).
	OptOut string   `json:"opt_out" yaml:"opt_out"`
	Flags  []string `json:"flags" yaml:"flags"`
	// LargeHeap swaps some flags when the heap is large (Aikar's
	// variant for heaps of 12 GiB and more).
	LargeHeap *HeapRule `json:"large_heap,omitempty" yaml:"large_heap"`
}

// VarJVMFlags is the start-template element that expands to the
// profile's JVM flag set: it must be a whole element, and it is the one
// placeholder that becomes several elements (or none), because its value
// is catalog data, never user input.
const VarJVMFlags = "JVM_FLAGS"

// InstallerSpec names an installer kind (Install* constants) and, for Fill,
// the upstream project.
type InstallerSpec struct {
	Kind    string `json:"kind" yaml:"kind"`
	Project string `json:"project,omitempty" yaml:"project"`
}

// HeapRule replaces start-command elements when SERVER_MEMORY ≥ MinMiB.
type HeapRule struct {
	MinMiB  int               `json:"min_mib" yaml:"min_mib"`
	Replace map[string]string `json:"replace" yaml:"replace"`
}

// Var returns the profile's environment variable named key.
func (p Profile) Var(key string) (EnvVar, bool) {
	for _, v := range p.EnvironmentVariables {
		if v.Key == key {
			return v, true
		}
	}
	return EnvVar{}, false
}

// Env checks the environment variables set for a server against the
// profile and returns the full environment: every set value, plus the
// default of every variable not set (variables with a null default are left
// out). It returns a *validate.Error (paths "env.KEY") for an unknown key, a
// required variable without value, a value that does not fit the type of
// the default (true/false for booleans, a number for numbers), or a control
// character in a value (values end up in server.properties and argv).
func (p Profile) Env(set map[string]string) (map[string]string, error) {
	var c validate.Collector
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if _, ok := p.Var(k); !ok {
			c.Add("env."+k, "unknown variable for %s", p.Type)
		}
	}
	out := make(map[string]string, len(p.EnvironmentVariables))
	for _, v := range p.EnvironmentVariables {
		val, ok := set[v.Key]
		if !ok {
			if d, has := defaultString(v.Default); has {
				out[v.Key] = d
			} else if !v.Optional {
				c.Add("env."+v.Key, "is required")
			}
			continue
		}
		if why := v.check(val); why != "" {
			c.Add("env."+v.Key, "%s", why)
			continue
		}
		out[v.Key] = val
	}
	for _, v := range p.EnvironmentVariables {
		if v.Requires != "" && out[v.Key] == "true" && out[v.Requires] == "" {
			c.Add("env."+v.Requires, "is required when %s is true", v.Key)
		}
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// EULAURL is where the Minecraft EULA is published.
const EULAURL = "https://aka.ms/MinecraftEULA"

// NeedsEULA reports whether the software runs only once its user accepted
// the Minecraft EULA: a profile with an EULA variable (the game servers;
// proxies and kiln-test have none).
func (p Profile) NeedsEULA() bool {
	_, ok := p.Var("EULA")
	return ok
}

// EULAAccepted reports whether set, the environment a user gave a server,
// accepts the Minecraft EULA for software that needs it: EULA is "true".
// It is always true for software that does not need it. Kiln never
// accepts the EULA for the user: the variable defaults to false.
func (p Profile) EULAAccepted(set map[string]string) bool {
	return !p.NeedsEULA() || set["EULA"] == "true"
}

// SecretVar reports whether key is a secret variable of the profile.
func (p Profile) SecretVar(key string) bool {
	v, ok := p.Var(key)
	return ok && v.Secret
}

// Properties returns the server.properties entries the environment sets:
// key → value for each variable with a Property, from env (the result of
// Env). Writing them (escaped) is the caller's job.
func (p Profile) Properties(env map[string]string) map[string]string {
	out := map[string]string{}
	for _, v := range p.EnvironmentVariables {
		if v.Property == "" {
			continue
		}
		if val, ok := env[v.Key]; ok {
			out[v.Property] = val
		}
	}
	return out
}

// Command expands the start command for one server. vars holds the
// platform variables (SERVER_MEMORY, SERVER_PORT, JAVA, SERVER_JAR or
// SERVER_ARGS_FILE, KILN_BIN: whichever the template uses) and the server's
// environment (see Env); a profile variable missing from vars takes its
// default. When the profile has StartArgsFile and vars has a non-empty
// SERVER_ARGS_FILE, that template is used instead of Start.
//
// It returns an error wrapping ErrUnresolved when a placeholder has no
// value (or a platform variable is empty), and a plain error when
// SERVER_MEMORY or SERVER_PORT is not a valid number.
func (p Profile) Command(vars map[string]string) ([]string, error) {
	tmpl := p.Start
	if len(p.StartArgsFile) > 0 && vars[VarServerArgsFile] != "" {
		tmpl = p.StartArgsFile
	}
	heap := 0 // MiB, when the template uses it
	if mem, ok := vars[VarServerMemory]; ok && usesVar(tmpl, VarServerMemory) {
		n, err := strconv.Atoi(mem)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("start command of %s: %s=%q is not a positive number of MiB", p.Type, VarServerMemory, mem)
		}
		heap = n
	}
	if port, ok := vars[VarServerPort]; ok && usesVar(tmpl, VarServerPort) {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("start command of %s: %s=%q is not a port", p.Type, VarServerPort, port)
		}
	}
	flags := p.jvmFlags(vars, heap)
	out := make([]string, 0, len(tmpl)+len(flags))
	for _, el := range tmpl {
		if el == "${"+VarJVMFlags+"}" {
			out = append(out, flags...)
			continue
		}
		if h := p.LargeHeap; h != nil && heap >= h.MinMiB {
			if r, ok := h.Replace[el]; ok {
				el = r
			}
		}
		s, err := expand(el, func(name string) (string, error) { return p.lookup(name, vars) })
		if err != nil {
			return nil, fmt.Errorf("start command of %s: %w", p.Type, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// jvmFlags is what ${JVM_FLAGS} expands to for a heap of heapMiB: the
// profile's flag set with its large-heap swaps, or nothing when the
// server opted out (its opt-out variable, else that variable's default,
// is false).
func (p Profile) jvmFlags(vars map[string]string, heapMiB int) []string {
	fs := p.JVMFlags
	if fs == nil {
		return nil
	}
	use, ok := vars[fs.OptOut]
	if !ok {
		if v, has := p.Var(fs.OptOut); has {
			use, _ = defaultString(v.Default)
		}
	}
	if use == "false" {
		return nil
	}
	out := slices.Clone(fs.Flags)
	if h := fs.LargeHeap; h != nil && heapMiB >= h.MinMiB {
		for i, f := range out {
			if r, ok := h.Replace[f]; ok {
				out[i] = r
			}
		}
	}
	return out
}

// lookup resolves one placeholder for Command.
func (p Profile) lookup(name string, vars map[string]string) (string, error) {
	if slices.Contains(platformVars, name) {
		if v := vars[name]; v != "" {
			return v, nil
		}
		return "", fmt.Errorf("${%s} has no value: %w", name, ErrUnresolved)
	}
	if v, ok := vars[name]; ok {
		return v, nil
	}
	if ev, ok := p.Var(name); ok {
		if d, has := defaultString(ev.Default); has {
			return d, nil
		}
	}
	return "", fmt.Errorf("${%s} has no value: %w", name, ErrUnresolved)
}

// Image returns the image choice to run a server needing Java javaMajor:
// the image with exactly that Java, else the one with the lowest newer
// Java, else the newest. A profile with one image always returns it.
func (p Profile) Image(javaMajor int) ImageChoice {
	var best ImageChoice
	found := false
	for _, im := range p.DockerImages {
		if im.Java == javaMajor {
			return im
		}
		if im.Java > javaMajor && (!found || im.Java < best.Java) {
			best, found = im, true
		}
	}
	if found {
		return best
	}
	for _, im := range p.DockerImages {
		if im.Java >= best.Java {
			best = im
		}
	}
	return best
}

// clone returns a copy that shares no slice or map with p, so a caller can
// not change the catalog through a returned Profile.
func (p Profile) clone() Profile {
	p.DockerImages = slices.Clone(p.DockerImages)
	p.EnvironmentVariables = slices.Clone(p.EnvironmentVariables)
	p.Start = slices.Clone(p.Start)
	p.StartArgsFile = slices.Clone(p.StartArgsFile)
	if p.LargeHeap != nil {
		h := *p.LargeHeap
		h.Replace = maps.Clone(h.Replace)
		p.LargeHeap = &h
	}
	p.Include = slices.Clone(p.Include)
	if p.JVMFlags != nil {
		fs := *p.JVMFlags
		fs.Flags = slices.Clone(fs.Flags)
		if fs.LargeHeap != nil {
			h := *fs.LargeHeap
			h.Replace = maps.Clone(h.Replace)
			fs.LargeHeap = &h
		}
		p.JVMFlags = &fs
	}
	for i, v := range p.EnvironmentVariables {
		v.Enum = slices.Clone(v.Enum)
		p.EnvironmentVariables[i] = v
	}
	return p
}

// defaultString renders a default value the way an environment holds it.
func defaultString(d any) (string, bool) {
	switch v := d.(type) {
	case nil:
		return "", false
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case int:
		return strconv.Itoa(v), true
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), true
	default:
		return fmt.Sprint(v), true
	}
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func usesVar(tmpl []string, name string) bool {
	for _, el := range tmpl {
		found := false
		_ = placeholders(el, func(n string) { found = found || n == name })
		if found {
			return true
		}
	}
	return false
}

// expand replaces every ${NAME} in s with resolve(NAME). A "$" not followed
// by "{" is kept as is.
func expand(s string, resolve func(string) (string, error)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated placeholder in %q", s)
		}
		name := s[i+2 : i+2+end]
		if !validName(name) {
			return "", fmt.Errorf("bad placeholder name %q", name)
		}
		v, err := resolve(name)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
		s = s[i+2+end+1:]
	}
}

// placeholders calls fn with the name of every placeholder of s and reports
// a malformed one.
func placeholders(s string, fn func(string)) error {
	_, err := expand(s, func(name string) (string, error) { fn(name); return "", nil })
	return err
}

// validName reports whether name is an environment variable name:
// [A-Z_][A-Z0-9_]*.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
