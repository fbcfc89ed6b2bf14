package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(owner of this file): replace this placeholder with the real command.
func newLogitsCmd(_ *app) *cobra.Command {
	return &cobra.Command{
		Use:    "logits",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("logits: not implemented yet")
		},
	}
}
