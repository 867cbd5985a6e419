// Command shim is the holder of the process runtime's tests: it runs
// runtime.RunHolder as its `shim` command, as `kiln shim` does, and
// runtime.RunSandbox as its `sandbox-exec` command, as `kiln
// sandbox-exec` does, so that the tests start real holders and real
// sandboxes without building kiln.
//
// It must never do anything `kiln shim` does not: it is only the entry
// point, the holder itself is internal/runtime's, so the tests prove the
// code kiln runs.
package main
