"""`--mode=serve`: a translation server speaking LibreTranslate's HTTP API (and our own
`/v1/translate`), which decodes concurrent requests together.

`languages` (the directions a run translates), `requests` (request bodies to checked
requests), `batcher` (the queue that gathers sentences into decode batches), `service` (the
model and its translators), `server` (HTTP, start-up, SIGTERM).
"""
