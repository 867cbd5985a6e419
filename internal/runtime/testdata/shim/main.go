package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kilnhq/kiln/internal/runtime"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "sandbox-exec" {
		if err := runtime.RunSandbox(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "shim:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "shim" {
		fmt.Fprintln(os.Stderr, "usage: shim shim [--hold] DIR | shim sandbox-exec [--probe]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runtime.RunHolder(ctx, os.Args[2:], "test", os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "shim:", err)
		os.Exit(1)
	}
}
