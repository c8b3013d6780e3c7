"""MQTT 3.1.1 and 5.0, sans I/O: the packet codec (codec), MQTT 5 properties and the data types of the
wire (properties), the syntax of topic names and topic filters (names), and how names, filters and
payloads map onto canopy's topic tree (mapping).

Pure: no sockets, no asyncio, no threads, no clock, no Ray; a broker shell feeds bytes in and writes
the bytes that come out.
"""
