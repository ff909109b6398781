/** Webhook events and limits the contract states (portable: the Api and clients import them). */
export const WEBHOOK_EVENTS = ["t1_complete", "t2_complete"] as const
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number]
export const WEBHOOK_LABEL_MAX = 200
