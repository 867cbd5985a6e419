// Command helper is the game server stand-in of the process runtime's
// tests. It runs its arguments in order, then prints "ready" and reads
// stdin: a line that is one of the commands below is run, any other is
// echoed as "echo: <line>"; it exits 0 at the end of stdin.
//
//	out:<text>   prints text on stdout
//	err:<text>   prints text on stderr
//	long:<n>     prints a line of n 'x'
//	lines:<n>    prints n lines "line 1" … "line <n>"
//	alloc:<mib>  allocates and touches mib MiB more, then prints "allocated"
//	child        starts "helper hold" in its process group: "child <pid>"
//	orphan       starts "helper hold" in a session of its own, holding
//	             stdout: "orphan <pid>"
//	write:<path> writes "from <its pid>" to path, mode 0644: "wrote <path>"
//	read:<path>  prints "read <path>: <contents>", or "read <path>: error <why>"
//	env:<name>   prints "<name>=<its value>"
//	exit:<code>  exits with code
//	hold         blocks until killed
//
// "helper nosysadmin ARGV…" executes ARGV without CAP_SYS_ADMIN instead
// (a trampoline refused its mounts, as in a container without it).
package main
