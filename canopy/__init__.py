"""canopy: a clustered real-time data broker. This package is its public face:
the client library, the wire protocol codec and the ``canopy`` command line."""

__version__ = "0.1.0"
