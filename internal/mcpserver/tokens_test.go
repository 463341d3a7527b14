package mcpserver_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/runbox/runbox/internal/mcpserver/mcptest"
)

// The sizes a model pays for in its context, logged for docs/mcp.md's
// benchmark: tools/list's JSON (the tool list every request carries) and
// the JSON of a typical exec result (text and structured content).
// Run: go test -run TestTokenSizes -v ./internal/mcpserver/
func TestTokenSizes(t *testing.T) {
	s := startStdio(t)
	list, err := s.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "exec",
		Arguments: map[string]any{"command": "printf 'ok %d\\n' 1 2 3 4 5 6 7 8 9 10; echo warning >&2; exit 1"}})
	if err != nil || res.IsError {
		t.Fatal(res, err)
	}
	rb, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		in, _ := json.Marshal(tool.InputSchema)
		out, _ := json.Marshal(tool.OutputSchema)
		all, _ := json.Marshal(tool)
		t.Logf("%-15s %5d bytes: description %d, input schema %d, output schema %d", tool.Name, len(all), len(tool.Description), len(in), len(out))
	}
	t.Logf("tools/list: %d bytes (%d tools); a typical exec result: %d bytes (text %d bytes)",
		len(lb), len(list.Tools), len(rb), len(mcptest.ResultText(res)))
	t.Logf("typical exec result: %s", rb)
}
