"""Reading compiler output: lexers, folding, source links and the paged IR view.

Everything here is text processing on the server side; nothing imports jax.
"""
