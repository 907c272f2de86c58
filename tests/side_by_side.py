"""Launches that mostly wait (MPI starting and ending around a usage error, not computing), run four
at a time before a module's tests read them: each test still asserts its own case, in a quarter of
the time the launches take one after another."""

from concurrent.futures import ThreadPoolExecutor


def side_by_side(launch, keys, workers=4):
    """{key: launch(key), or the exception it raised} for every key, `workers` launches at a time."""

    def one(key):
        try:
            return launch(key)
        except Exception as e:  # raised again by the key's own test (outcome)
            return e

    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(keys, pool.map(one, keys)))


def outcome(results, key):
    """The launch's result for `key`; the exception it raised, raised here."""
    r = results[key]
    if isinstance(r, Exception):
        raise r
    return r
