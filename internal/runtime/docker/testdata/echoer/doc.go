// Command echoer is the program inside the docker runtime's test image (an
// image FROM scratch holding only this static binary). It prints "ready",
// serves "hello" on the TCP port given as its first argument and answers
// console commands read from stdin, one per line:
//
//	id             uid=<uid> gid=<gid>
//	caps           capeff=<hex> (CapEff of /proc/self/status)
//	write <path>   write <path> ok | write <path> err <reason>
//	listen <port>  serves "hello" on that TCP port too: listen <port> ok | err <reason>
//	dial <addr>    connects to host:port and reads a line: dial <addr> ok <line> | err <reason>
//	               (err timeout … when nothing answered within 5 s)
//	stderr <text>  err: <text>, on stderr
//	long <n>       a line of n 'x'
//	burn           spins one CPU until the container ends
//	alloc <mib>    allocates and touches <mib> MiB (to meet the memory limit)
//	exit <code>    exits with that code
//	anything else  echo: <line>
package main
