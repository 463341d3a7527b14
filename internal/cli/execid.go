package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/runbox/runbox/client"
)

// resolveExec turns what the user typed for an exec id into the exec's
// id: the id itself, or a unique prefix of one the daemon keeps, like a
// sandbox id prefix. A prefix of several ids is an error listing them; one
// of none comes back unchanged (the daemon then says whether it knows it).
func resolveExec(ctx context.Context, cl *client.Client, key string) (string, error) {
	execs, err := cl.List(ctx, client.ListWithoutOutput())
	if err != nil {
		return "", err
	}
	var matches []string
	for _, e := range execs {
		if e.ID == key {
			return key, nil
		}
		if strings.HasPrefix(e.ID, key) {
			matches = append(matches, e.ID)
		}
	}
	switch len(matches) {
	case 0:
		return key, nil
	case 1:
		return matches[0], nil
	}
	slices.Sort(matches)
	return "", fmt.Errorf("exec id prefix %q is ambiguous: it matches %d execs: %s (give more of the id)",
		key, len(matches), strings.Join(matches, ", "))
}
