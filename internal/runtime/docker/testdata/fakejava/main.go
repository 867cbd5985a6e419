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
