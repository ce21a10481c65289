//go:build !linux

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func labCmd() *cobra.Command {
	return &cobra.Command{Use: "lab", Short: "The network lab (Linux only)", RunE: func(*cobra.Command, []string) error {
		return errors.New("lab: needs Linux (network namespaces and TUN devices)")
	}}
}

func newLabTarget(string) (interface{ Close() error }, error) {
	return nil, errors.New("lab: needs Linux")
}
