"""Step programs on sim time: a step is an MCP flight tool and its arguments (issue 24)."""
