"""What the broker and the bridge must agree on, in one Django-free package.

The bridge (pocolobby/bridge) imports this package and nothing else of `lobbies`; it imports
no other module (import-linter checks both). The event version, the header names, the frames
(their type names, each one's shape, and the bridge's parser of each), the one time format,
the cursors, and the delivery and addressing facts a message carries on the wire; and how
text another party wrote is shown in a terminal, which the bridge and the CLI share.
"""
