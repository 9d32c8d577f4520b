"""The worker process: the agent that leases jobs from a server (`agent`, `link`,
`lease`), the warm runner child processes that hold JAX (`runner`, `runner_pool`), and
multi-process worker groups (`group`).

The agent itself never imports JAX; its runners do.
"""
