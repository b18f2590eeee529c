"""The crawler on top of the fetcher: frontier, link extraction, robots.txt, parse processes.

Nothing in the fetcher imports this package; it imports the fetcher.
"""
