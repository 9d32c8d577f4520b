"""View models: the context each page, its htmx fragment and its JSON twin render, built
from the job JSON the API returns (`app.pages.jobs`), and the charts pages draw.

Imports app.web, app.store, app.dispatch, app.queue and app.ir; never a route.
"""
