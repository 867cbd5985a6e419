package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) > 1 {
		ln, err := net.Listen("tcp", ":"+os.Args[1])
		if err != nil {
			fmt.Println("listen error:", err)
			os.Exit(3)
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
