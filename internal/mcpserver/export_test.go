package mcpserver

// HTTPServers counts the Servers h keeps (one per tenant and bound
// sandbox), for tests.
func HTTPServers(h *HTTPHandler) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}
