"""workerpool's benchmark: ``python -m bench --url postgresql://... --n 50000 --repeats 3``.

Every run creates its own randomly named database on the server, migrates it, measures, prints a
table and one JSON line per figure, and drops the database. See ``README.md`` § Performance.
"""
