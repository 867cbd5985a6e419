// Command fakejava is /usr/bin/java in the images of the docker runtime's
// installer test (images FROM scratch: no real Java can be pulled). Run
// as `java -jar <installer> --installServer`, it behaves as a Forge
// installer: it reads the jar's install_profile.json and writes
// installed-by.txt in its working directory, naming the Java major of
// its image (/java-major), its uid and the game version; a profile whose
// version is "fail" makes it fail (exit 3) after a line on stderr.
//
// What it must never do: be more than a test stand-in — it reads only its
// arguments, /java-major and the installer jar it is given.
package main
