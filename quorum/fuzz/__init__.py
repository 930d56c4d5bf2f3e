"""Protocol fuzzing at volume (issue 19): garbage frames against live nodes, `quorum fuzz`.

`frames` makes the frames (sans-IO: a seeded generator, no sockets), `attack` sends them over many
connections and classifies what each node did, `watch` samples the nodes' memory and descriptors
and keeps a real client producing and consuming meanwhile, and `run` starts a local cluster, puts
them together and prints the table.
"""
