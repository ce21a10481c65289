//go:build !linux

package main

import (
	"errors"

	"github.com/spf13/cobra"

	"meridian/internal/tools/bench"
)

var errLabLinux = errors.New("lab: needs Linux (network namespaces and TUN devices)")

func labCmd() *cobra.Command {
	return &cobra.Command{Use: "lab", Short: "The network lab (Linux only)", RunE: func(*cobra.Command, []string) error {
		return errLabLinux
	}}
}

func newLabTarget(string) (bench.Target, error) { return nil, errLabLinux }

func labNodes(bench.Target) int { return 0 }

func benchLoopbackCmd() *cobra.Command {
	return &cobra.Command{Use: "loopback", Short: "Meridian and etcd on loopback (Linux only)", RunE: func(*cobra.Command, []string) error {
		return errors.New("bench loopback: needs Linux")
	}}
}
