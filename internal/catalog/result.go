package catalog

// Result describes a profile installed into a server root: what the
// installer (package install) resolved and wrote, and what starting it
// needs. It is the contract between installing and running: Vars feeds
// Command, JavaMajor feeds Image.
type Result struct {
	Version   string // resolved version: "latest" → "1.21.4"
	Build     string // upstream build: Paper/Purpur/Jenkins build, Fabric loader, Forge/NeoForge version
	JavaMajor int    // Java to run it with; 0 for kiln-test
	Jar       string // jar to run, relative to the root; empty with ArgsFile or for kiln-test
	ArgsFile  string // JVM args file relative to the root (Forge 1.17+, NeoForge); empty otherwise
	SHA256    string // of the downloaded artifact (the jar, or the Forge/NeoForge/Quilt installer)
	Source    string // upstream URL of that artifact (before mirror rewriting)
	// Checksum names the upstream checksum that verified the artifact:
	// sha256, sha1 or md5; empty when the upstream publishes none (Fabric's
	// launcher) and SHA256 is only what Kiln computed.
	Checksum string
}

// Vars returns the platform variables of the result for Command:
// SERVER_JAR and/or SERVER_ARGS_FILE, whichever is set.
func (r Result) Vars() map[string]string {
	v := map[string]string{}
	if r.Jar != "" {
		v[VarServerJar] = r.Jar
	}
	if r.ArgsFile != "" {
		v[VarServerArgsFile] = r.ArgsFile
	}
	return v
}
