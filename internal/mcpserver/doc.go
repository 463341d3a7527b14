// Package mcpserver serves runbox as Model Context Protocol tools, so any
// MCP agent (Claude Code, Cursor, VS Code, Goose, ...) runs its shell
// commands and file edits in a runbox sandbox with runbox's semantics: exec
// waits a bounded time (Config.Wait, 30 s) and then returns the output so
// far with the command still running, which exec_output collects, so that
// no command dies because of the client's request timeout; a command that
// outlives its own timeout is stopped with everything it started; a
// cancelled tool call stops its command with the stop protocol, and the
// sandbox lives on. The file tools reach the sandbox's whole filesystem as
// its commands see it (files_view.go).
//
// A [Server] works on a [Sandboxes], a small interface over "a place that
// holds sandboxes": [Providers] (this machine's providers, what runbox mcp
// uses on stdio), [Remote] (a runbox serve, what runbox mcp uses with
// RUNBOX_HOST), or one tenant's view of a control plane (runbox serve's
// /mcp, which also implements [Holder]). [Server.Run]
// serves one MCP session on a transport (stdio); [NewHTTPHandler] serves
// MCP over streamable HTTP behind bearer tokens, one [Server] per tenant.
//
// Each MCP session has its own state: a default sandbox made on first use
// (or a configured existing one), a persistent shell session per sandbox
// (cd and export carry over between exec calls), the execs it started, and the shell sessions and sandboxes it made. When the MCP
// session ends, its background execs are cancelled, its shell sessions
// forgotten and the sandboxes it made removed, unless made with keep.
//
// Tools: exec, exec_output, exec_cancel, exec_list, file_read, file_write,
// file_edit, file_list, file_delete, sandbox_create, sandbox_list,
// sandbox_remove. See docs/mcp.md.
package mcpserver
