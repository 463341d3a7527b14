package runbox

// Regenerate the API code under gen/ from proto/ with the generators pinned in
// go.mod's tool lines.
//go:generate go tool buf generate
