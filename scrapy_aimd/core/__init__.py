"""The pure side of scrapy-aimd: the rules, with no Scrapy and no Twisted.

Every module here takes the clock as an argument (or needs none), so that each
rule is tested with a fake clock. The Scrapy-facing modules one level up adapt
these to the engine.
"""
