"""What the JupyterLab panel's server extension reads, kept apart from the Tornado handlers.

Every module here is read-only and light: it imports nothing from IPython, ipywidgets,
jupyter_server or claude_agent_sdk, so the handlers in ``flower_magic.server`` stay cheap to load and
these functions can be tested and benchmarked without a server.
"""
