package cli

import (
	"io"

	"github.com/runbox/runbox/internal/execcli"
)

// writeJSON prints v as one line of JSON (execcli.WriteJSON).
func writeJSON(w io.Writer, v any) error { return execcli.WriteJSON(w, v) }
