"""Is a difference between two systems real: paired permutation and bootstrap tests of corpus scores over the
same images (``capeval.compare``, ``capeval.compare_many``, ``capeval compare``), with the names scores are shown
under. Needs ``capeval[stats]`` (scipy) for the tests themselves."""
