// Package serverstest gives tests a real servers.Service: the kiln binary
// built once per test process (statically, so the docker suite can wrap it
// in a scratch image), a local node with its own random loopback port
// range, the development catalog, the real installer and a runtime. Nothing
// of ours is mocked: kiln-test servers are real `kiln testserver`
// processes or containers.
package serverstest
