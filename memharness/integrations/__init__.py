"""Adapters that let agent frameworks keep their memory and state in memory-harness.

``langgraph_saver.MemharnessSaver`` is a LangGraph checkpointer on our checkpoint format and
table; ``langgraph_store.MemharnessStore`` is a LangGraph store whose semantic search runs
through our retrieval pipeline. Importing this package loads neither LangGraph nor them: the
package is not named ``langgraph`` so that it can never shadow the real one.
"""
