"""The worker process: the agent that leases jobs from a server (`agent`, with its side of
the wire in `link`), the warm runner child processes that hold JAX (`runner`,
`runner_pool`), and multi-process worker groups (`group`,
`python -m workers.agent.group follow`).

The agent itself never imports JAX; its runners do.
"""
