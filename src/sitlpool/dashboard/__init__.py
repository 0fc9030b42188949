"""The live web dashboard of the pool (issue 25)."""
