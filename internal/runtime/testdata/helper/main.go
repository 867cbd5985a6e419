package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// held keeps what alloc allocated.
var held [][]byte

func main() {
	if len(os.Args) > 2 && os.Args[1] == "nosysadmin" {
		noSysAdmin(os.Args[2:])
	}
	for _, arg := range os.Args[1:] {
		if !run(arg) {
			fmt.Println("unknown argument:", arg)
			os.Exit(2)
		}
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if !run(sc.Text()) {
			fmt.Println("echo: " + sc.Text())
		}
	}
}

// run runs one command; false when it is none.
func run(arg string) bool {
	cmd, val, _ := strings.Cut(arg, ":")
	switch cmd {
	case "out":
		fmt.Println(val)
	case "err":
		fmt.Fprintln(os.Stderr, val)
	case "long":
		n, _ := strconv.Atoi(val)
		fmt.Println(strings.Repeat("x", n))
	case "lines":
		n, _ := strconv.Atoi(val)
		for i := 1; i <= n; i++ {
			fmt.Println("line", i)
		}
	case "alloc":
		n, _ := strconv.Atoi(val)
		for range n {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			held = append(held, b)
		}
		fmt.Println("allocated")
	case "child", "orphan":
		c := exec.Command(os.Args[0], "hold")
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: cmd == "orphan"}
		if err := c.Start(); err != nil {
			fmt.Println("start error:", err)
			os.Exit(2)
		}
		fmt.Println(cmd, c.Process.Pid)
	case "write":
		// A file the game leaves for whoever may read it (0644), with
		// its pid in it.
		if err := os.WriteFile(val, []byte("from "+strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fmt.Println("write error:", err)
			break
		}
		if err := os.Chmod(val, 0o644); err != nil {
			fmt.Println("write error:", err)
			break
		}
		fmt.Println("wrote", val)
	case "read":
		b, err := os.ReadFile(val)
		if err != nil {
			fmt.Printf("read %s: error %v\n", val, err)
			break
		}
		fmt.Printf("read %s: %s\n", val, b)
	case "env":
		fmt.Println(val + "=" + os.Getenv(val))
	case "exit":
		n, _ := strconv.Atoi(val)
		os.Exit(n)
	case "hold":
		for {
			time.Sleep(time.Hour)
		}
	default:
		return false
	}
	return true
}

// noSysAdmin executes argv without CAP_SYS_ADMIN: dropped from this
// thread's bounding set, it is not in what the exec gives root (as in a
// container that lacks it).
func noSysAdmin(argv []string) {
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_ADMIN, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "drop CAP_SYS_ADMIN:", err)
		os.Exit(2)
	}
	err := syscall.Exec(argv[0], argv, os.Environ())
	fmt.Fprintln(os.Stderr, "exec:", err)
	os.Exit(2)
}
