"""flower_magic: a long-horizon Claude agent in a notebook that never loses the conversation."""
