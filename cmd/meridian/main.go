// Command meridian is Meridian's single binary: the server, the client CLI, the demo and the
// benchmarks.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "meridian",
		Short:         "Meridian: a geo-distributed key-value store",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serverCmd(), kvCmd(), streamCmd(), adminCmd(), demoCmd(), benchCmd(), simCmd(), labCmd(), autoscaleCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		// Every error is one line on stderr and a non-zero exit.
		fmt.Fprintln(os.Stderr, "meridian: "+oneLine(err))
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
}
