package catalog

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/kilnhq/kiln/internal/validate"
)

//go:embed profiles/*.yaml profiles/include/*.yaml
var profileFiles embed.FS

// Catalog is the set of software profiles of one process. It is read-only
// once loaded and safe for concurrent use.
type Catalog struct {
	byType map[string]Profile
	list   []Profile // ordered by ID
}

// Load reads the embedded profiles (profiles/*.yaml, with the shared parts
// they include from profiles/include/*.yaml) and validates them.
// Profiles marked dev (kiln-test, kiln-test-proxy) are included only when dev is true. An
// error means a broken profile file: a bug caught by this package's tests.
func Load(dev bool) (*Catalog, error) {
	return load(profileFiles, "profiles", dev)
}

func load(fsys fs.FS, dir string, dev bool) (*Catalog, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("load catalog: %w", err)
	}
	var c validate.Collector
	includes, err := loadIncludes(fsys, path.Join(dir, "include"), &c)
	if err != nil {
		return nil, fmt.Errorf("load catalog: %w", err)
	}
	var all []Profile
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("load catalog: %w", err)
		}
		var p Profile
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&p); err != nil {
			c.Add(path.Base(name), "%v", err)
			continue
		}
		p = applyIncludes(&c, path.Base(name), p, includes)
		checkProfile(&c, path.Base(name), p)
		all = append(all, p)
	}
	checkSet(&c, all)
	if err := c.Err(); err != nil {
		return nil, fmt.Errorf("load catalog: %w", err)
	}
	cat := &Catalog{byType: map[string]Profile{}}
	for _, p := range all {
		if p.Dev && !dev {
			continue
		}
		cat.byType[p.Type] = p
		cat.list = append(cat.list, p)
	}
	slices.SortFunc(cat.list, func(a, b Profile) int { return a.ID - b.ID })
	return cat, nil
}

// include is a shared part of profiles (profiles/include/<name>.yaml):
// environment variables every including profile gets, and a JVM flag set.
type include struct {
	EnvironmentVariables []EnvVar `yaml:"environment_variables"`
	JVMFlags             *FlagSet `yaml:"jvm_flags"`
}

func loadIncludes(fsys fs.FS, dir string, c *validate.Collector) (map[string]include, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	out := map[string]include{}
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		var inc include
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&inc); err != nil {
			c.Add("include/"+path.Base(name), "%v", err)
			continue
		}
		out[strings.TrimSuffix(path.Base(name), ".yaml")] = inc
	}
	return out, nil
}

// applyIncludes appends what p's includes give it: their variables after
// its own (a duplicate key is then reported by checkProfile), and the one
// JVM flag set.
func applyIncludes(c *validate.Collector, file string, p Profile, includes map[string]include) Profile {
	for i, name := range p.Include {
		inc, ok := includes[name]
		if !ok {
			c.Add(validate.Join(file, fmt.Sprintf("include[%d]", i)), "no include/%s.yaml", name)
			continue
		}
		p.EnvironmentVariables = append(p.EnvironmentVariables, inc.EnvironmentVariables...)
		if inc.JVMFlags != nil {
			if p.JVMFlags != nil {
				c.Add(validate.Join(file, fmt.Sprintf("include[%d]", i)), "a second JVM flag set (%s after %s)", inc.JVMFlags.Name, p.JVMFlags.Name)
				continue
			}
			fs := *inc.JVMFlags
			p.JVMFlags = &fs
		}
	}
	return p.clone()
}

// List returns every profile, ordered by ID.
func (c *Catalog) List() []Profile {
	out := make([]Profile, len(c.list))
	for i, p := range c.list {
		out[i] = p.clone()
	}
	return out
}

// Get returns the profile whose Type is typ.
func (c *Catalog) Get(typ string) (Profile, bool) {
	p, ok := c.byType[typ]
	if !ok {
		return Profile{}, false
	}
	return p.clone(), true
}

// checkProfile records every broken rule of one profile file.
func checkProfile(c *validate.Collector, file string, p Profile) {
	at := func(field string) string { return validate.Join(file, field) }
	if p.ID <= 0 {
		c.Add(at("id"), "must be a positive integer")
	}
	if want := strings.TrimSuffix(file, ".yaml"); p.Type != want {
		c.Add(at("type"), "is %q, want the file name %q", p.Type, want)
	}
	for _, f := range []struct{ field, v string }{{"name", p.Name}, {"description", p.Description}, {"stop_command", p.StopCommand}} {
		if strings.TrimSpace(f.v) == "" {
			c.Add(at(f.field), "must not be empty")
		}
	}
	if p.Category != Server && p.Category != Proxy {
		c.Add(at("category"), "must be server or proxy")
	}
	if p.Port < 1 || p.Port > 65535 {
		c.Add(at("port"), "must be a port number")
	}
	if p.PluginDir != "" && p.PluginDir != "plugins" && p.PluginDir != "mods" {
		c.Add(at("plugin_dir"), "must be plugins, mods or empty")
	}
	switch p.Listen {
	case ListenProperties, ListenVelocity, ListenBungeeCord:
	default:
		c.Add(at("listen"), "must be properties, velocity or bungeecord")
	}
	switch p.Installer.Kind {
	case InstallFill:
		if p.Installer.Project == "" {
			c.Add(at("installer.project"), "is required for fill")
		}
	case InstallPurpur, InstallMojang, InstallFabric, InstallQuilt, InstallForge, InstallNeoForge, InstallBungeeCord, InstallTestServer, InstallCustom:
	default:
		c.Add(at("installer.kind"), "unknown installer %q", p.Installer.Kind)
	}
	switch p.Java.Source {
	case JavaMinecraft, JavaNone:
	case JavaFixed:
		if p.Java.Major < 8 {
			c.Add(at("java.major"), "must be 8 or more for a fixed rule")
		}
	default:
		c.Add(at("java.source"), "must be minecraft, fixed or none")
	}

	if len(p.DockerImages) == 0 {
		c.Add(at("docker_images"), "must list at least one image")
	}
	for i, im := range p.DockerImages {
		if im.Label == "" || im.Value == "" {
			c.Add(at(fmt.Sprintf("docker_images[%d]", i)), "needs a label and a value")
		}
	}

	keys := map[string]bool{}
	for i, v := range p.EnvironmentVariables {
		vp := at(fmt.Sprintf("environment_variables[%d]", i))
		if !validName(v.Key) {
			c.Add(vp+".key", "%q is not an environment variable name", v.Key)
		}
		if slices.Contains(platformVars, v.Key) || v.Key == VarJVMFlags {
			c.Add(vp+".key", "%s is a platform variable", v.Key)
		}
		if keys[v.Key] {
			c.Add(vp+".key", "duplicate key %s", v.Key)
		}
		keys[v.Key] = true
		if v.Title == "" || v.Description == "" {
			c.Add(vp, "needs a title and a description")
		}
		switch v.Default.(type) {
		case nil, string, bool, int, float64:
		default:
			c.Add(vp+".default", "must be a string, number, boolean or null")
		}
		switch v.Type {
		case "", TypeString, TypeBoolean, TypeInteger, TypeNumber, TypePlayers, TypeURL, TypeSHA256:
		default:
			c.Add(vp+".type", "must be string, boolean, integer, number, players, url or sha256")
		}
		if (v.Min != nil || v.Max != nil) && v.Kind() != TypeInteger {
			c.Add(vp, "min and max bound integers only")
		}
		if d, ok := defaultString(v.Default); ok {
			if why := v.check(d); why != "" {
				c.Add(vp+".default", "%s", why)
			}
		}
	}
	for i, v := range p.EnvironmentVariables {
		if v.Requires == "" {
			continue
		}
		if v.Kind() != TypeBoolean || !keys[v.Requires] {
			c.Add(at(fmt.Sprintf("environment_variables[%d].requires", i)), "needs a boolean variable and another variable of the profile")
		}
	}
	if fs := p.JVMFlags; fs != nil {
		if ov, ok := p.Var(fs.OptOut); !ok || ov.Kind() != TypeBoolean {
			c.Add(at("jvm_flags.opt_out"), "%s must be a boolean variable of the profile", fs.OptOut)
		}
		if len(fs.Flags) == 0 {
			c.Add(at("jvm_flags.flags"), "must not be empty")
		}
		if h := fs.LargeHeap; h != nil {
			for _, from := range slices.Sorted(maps.Keys(h.Replace)) {
				if !slices.Contains(fs.Flags, from) {
					c.Add(at("jvm_flags.large_heap.replace"), "%q is not one of the flags", from)
				}
			}
		}
		if !slices.Contains(p.Start, "${"+VarJVMFlags+"}") {
			c.Add(at("start"), "includes the %s flags but has no ${%s} element", fs.Name, VarJVMFlags)
		}
	}
	if p.VersionVar != "" && !keys[p.VersionVar] {
		c.Add(at("version_var"), "%s is not one of the profile's variables", p.VersionVar)
	}

	if len(p.Start) == 0 {
		c.Add(at("start"), "must not be empty")
	}
	for _, t := range []struct {
		name string
		tmpl []string
	}{{"start", p.Start}, {"start_args_file", p.StartArgsFile}} {
		name := t.name
		for i, el := range t.tmpl {
			if el == "${"+VarJVMFlags+"}" && p.JVMFlags != nil {
				continue
			}
			err := placeholders(el, func(n string) {
				if n == VarJVMFlags {
					c.Add(at(fmt.Sprintf("%s[%d]", name, i)), "${%s} must be a whole element, in a profile that includes a JVM flag set", VarJVMFlags)
					return
				}
				if !keys[n] && !slices.Contains(platformVars, n) {
					c.Add(at(fmt.Sprintf("%s[%d]", name, i)), "placeholder ${%s} is neither a platform nor a profile variable", n)
				}
			})
			if err != nil {
				c.Add(at(fmt.Sprintf("%s[%d]", name, i)), "%v", err)
			}
		}
	}
	if h := p.LargeHeap; h != nil {
		if h.MinMiB <= 0 {
			c.Add(at("large_heap.min_mib"), "must be positive")
		}
		for _, from := range slices.Sorted(maps.Keys(h.Replace)) {
			if !slices.Contains(p.Start, from) {
				c.Add(at("large_heap.replace"), "%q is not an element of start", from)
			}
		}
	}
}

// checkSet records rules across profiles: unique ids and types.
func checkSet(c *validate.Collector, all []Profile) {
	ids := map[int]string{}
	types := map[string]bool{}
	for _, p := range all {
		if other, ok := ids[p.ID]; ok {
			c.Add(p.Type+".yaml.id", "id %d is also used by %s", p.ID, other)
		}
		ids[p.ID] = p.Type
		if types[p.Type] {
			c.Add(p.Type+".yaml.type", "duplicate type %s", p.Type)
		}
		types[p.Type] = true
	}
}
