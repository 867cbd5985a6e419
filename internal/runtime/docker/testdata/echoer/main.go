package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		if err := serve(os.Args[1]); err != nil {
			fmt.Println("listen error:", err)
			os.Exit(3)
		}
	}
	fmt.Println("ready")
	var hold [][]byte
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := sc.Text()
		cmd, arg, _ := strings.Cut(line, " ")
		switch cmd {
		case "id":
			fmt.Printf("uid=%d gid=%d\n", os.Getuid(), os.Getgid())
		case "caps":
			fmt.Println("capeff=" + capEff())
		case "write":
			if err := os.WriteFile(arg, []byte("written by echoer\n"), 0o644); err != nil {
				fmt.Printf("write %s err %v\n", arg, err)
			} else {
				fmt.Printf("write %s ok\n", arg)
			}
		case "listen":
			if err := serve(arg); err != nil {
				fmt.Printf("listen %s err %v\n", arg, err)
			} else {
				fmt.Printf("listen %s ok\n", arg)
			}
		case "dial":
			fmt.Printf("dial %s %s\n", arg, dial(arg))
		case "stderr":
			fmt.Fprintln(os.Stderr, "err: "+arg)
		case "long":
			n, _ := strconv.Atoi(arg)
			fmt.Println(strings.Repeat("x", n))
		case "burn":
			go func() {
				for {
				}
			}()
			fmt.Println("burning")
		case "alloc":
			n, _ := strconv.Atoi(arg)
			for range n {
				b := make([]byte, 1<<20)
				for i := range b {
					b[i] = 1
				}
				hold = append(hold, b)
			}
			fmt.Println("allocated", len(hold))
		case "exit":
			code, _ := strconv.Atoi(arg)
			os.Exit(code)
		default:
			fmt.Println("echo: " + line)
		}
	}
}

// serve answers "hello" to every TCP connection to port.
func serve(port string) error {
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "hello")
			c.Close()
		}
	}()
	return nil
}

// dial connects to addr and reads one line: "ok <line>", or "err <reason>"
// ("err timeout …" when nothing answered within 5 s).
func dial(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return "err timeout " + err.Error()
		}
		return "err " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "err read " + err.Error()
	}
	return "ok " + strings.TrimSpace(line)
}

func capEff() string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for l := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "missing"
}
