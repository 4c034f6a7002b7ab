"""`tracejudge ui`: the verdict explorer, server-rendered pages over the output topics."""
