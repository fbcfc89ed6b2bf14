package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/levers"
)

func newLeversCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "levers [flags]",
		Short: "list every MINFER_* lever: name, default, values, what it switches",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all := levers.All()
			if asJSON {
				type entry struct {
					levers.Lever
					Current *string `json:"current,omitempty"`
				}
				set := a.cfg.Set()
				out := make([]entry, len(all))
				for i, l := range all {
					out[i].Lever = l
					if v, ok := set[l.Name]; ok {
						out[i].Current = &v
					}
				}
				return writeJSON(cmd.OutOrStdout(), out, true)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "LEVER\tKIND\tDEFAULT\tVALUES\tBACKEND\tWORKLOAD\tWHAT IT SWITCHES")
			for _, l := range all {
				doc := l.Doc
				if l.Reserved != "" {
					doc += " [reserved, switches nothing yet: " + l.Reserved + "]"
				}
				// WORKLOAD: what abtest must run for the lever's path to
				// run at all ("-": the default workload does).
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, l.Kind, dash(l.Default),
					strings.Join(l.Values, "|"), l.Backend, dash(l.Workload), doc)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the registry as JSON instead of a table")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
