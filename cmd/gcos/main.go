// Command gcos is the GCOS daemon and operator CLI. This package only wires the concrete packages together.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := newApp(os.Stdout, os.Stderr)
	code := app.execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// exitError carries a specific exit status (e.g. 3 for a gate block) through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
