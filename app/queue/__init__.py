"""Everything between a request that queues work and the dispatcher: strict reading and
validation of a job, uploaded files, matrices expanded into jobs, the rate limiter and
the one admission.

Imports app.web, app.store and app.dispatch; never a route.
"""
