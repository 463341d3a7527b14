package cli

import (
	"io"

	"github.com/runbox/runbox/internal/execrules"
)

// writeJSON prints v as one line of JSON (execrules.WriteJSON).
func writeJSON(w io.Writer, v any) error { return execrules.WriteJSON(w, v) }
