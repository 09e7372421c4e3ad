"""A lobby's settings pages, `/<lobby>/settings` and the routes under it: for the owner, or
the local operator, only (`console.pages.lobby_page(settings=True)`)."""
