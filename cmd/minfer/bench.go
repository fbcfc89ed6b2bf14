package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(owner of this file): replace this placeholder with the real command.
func newBenchCmd(_ *app) *cobra.Command {
	return &cobra.Command{
		Use:    "bench",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("bench: not implemented yet")
		},
	}
}
