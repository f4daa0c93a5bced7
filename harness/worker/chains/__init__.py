"""Requests that follow requests on one worker: a session's turns, a pipeline's stages — each due at the one before's
end (+ a pause), counted from that instant."""
