/**
 * A Map kept in recency order, least recently touched first (the rate limiters' keys,
 * capped by evicting the oldest). `touch` moves a key to the end with a delete and a set,
 * except when it is the key touched last, already there: a Map that loses and gains an
 * entry on every request is rehashed every few requests into a new table, and those
 * tables survived scavenges (docs/performance.md).
 */
export class RecencyMap<K, V> {
  readonly #map = new Map<K, V>()
  /**
   * The key touched last. Only `touch` adds keys, so this key, when present, is the last
   * entry; when it was deleted since, `touch` adds it at the end anyway.
   */
  #newest: K | undefined

  get size(): number {
    return this.#map.size
  }

  get(key: K): V | undefined {
    return this.#map.get(key)
  }

  /** Sets `key` to `value` as the most recently touched. */
  touch(key: K, value: V): void {
    if (key !== this.#newest) this.#map.delete(key)
    this.#map.set(key, value)
    this.#newest = key
  }

  delete(key: K): void {
    this.#map.delete(key)
  }

  /** The least recently touched key, or undefined when empty. */
  oldest(): K | undefined {
    return this.#map.keys().next().value
  }

  /** The entries, least recently touched first (deleting the one visited is allowed). */
  entries(): IterableIterator<[K, V]> {
    return this.#map.entries()
  }
}
