// Command fakejava is /usr/bin/java in the images of the docker runtime's
// installer test (images FROM scratch: no real Java can be pulled). Run
// as `java -jar <installer> --installServer`, it behaves as a Forge
// installer: it reads the jar's install_profile.json and writes
// installed-by.txt in its working directory, naming the Java major of
// its image (/java-major), its uid and the game version; a profile whose
// version is "fail" makes it fail (exit 3) after a line on stderr.
package main

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 4 || os.Args[1] != "-jar" || os.Args[3] != "--installServer" {
		fmt.Fprintln(os.Stderr, "usage: java -jar <installer> --installServer")
		os.Exit(2)
	}
	major, err := os.ReadFile("/java-major")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	zr, err := zip.OpenReader(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f, err := zr.Open("install_profile.json")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var prof struct {
		Version string `json:"version"`
	}
	if err := json.NewDecoder(f).Decode(&prof); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("installing " + prof.Version)
	if prof.Version == "fail" {
		fmt.Fprintln(os.Stderr, "the installer failed on purpose")
		os.Exit(3)
	}
	out := "java " + strings.TrimSpace(string(major)) + " uid=" + strconv.Itoa(os.Getuid()) + " " + prof.Version + "\n"
	if err := os.WriteFile("installed-by.txt", []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("installed")
}
