"""The code-retrieval evaluation set: what a coding agent of a small web shop remembers.

How it was made: written by hand in one pass by the engineer who built the code path, for a
fictional shop (payments, orders, inventory, notifications, deploy), *before* the code
vector or the query classifier existed and never edited after a measurement. Thirty-six code
memories (``modality=code``: functions and classes in Python, TypeScript, Go, Rust and Java,
SQL, YAML and other configuration, shell commands, a diff, stack traces and error logs) sit
among thirty text memories of the same project's chatter, which name the same modules in
words. Forty questions ask about the code: twenty-five name an identifier, a path or an
error code the way an agent quotes them (``style="identifier"``), fifteen describe the
behaviour in plain words (``style="natural"``). Each question's gold set is the code memories
that answer it (two for the questions a function and its test both answer). No text memory
is gold: the set measures finding code, and the chatter is there to be passed over.

Nothing here comes from a public data set; the project is fiction.
"""

from __future__ import annotations

from typing import NamedTuple


class CodeMemory(NamedTuple):
    id: str
    modality: str  # code or text
    content: str


class CodeQuestion(NamedTuple):
    text: str
    style: str  # identifier or natural
    gold: frozenset[str]


CODE_MEMORIES: tuple[CodeMemory, ...] = (
    CodeMemory(
        "c01",
        "code",
        """def retry_with_backoff(fn, attempts=5, base_delay_s=0.5):
    for attempt in range(attempts):
        try:
            return fn()
        except TransientError:
            time.sleep(base_delay_s * 2 ** attempt)
    raise RetriesExhausted(fn.__name__)""",
    ),
    CodeMemory(
        "c02",
        "code",
        """export async function fetchUserById(userId: string): Promise<User> {
  const res = await httpClient.get(`/api/v2/users/${userId}`);
  return UserSchema.parse(res.data);
}""",
    ),
    CodeMemory(
        "c03",
        "code",
        """func (s *OrderService) CancelOrder(ctx context.Context, orderID string) error {
	order, err := s.repo.FindOrder(ctx, orderID)
	if err != nil {
		return fmt.Errorf("cancel order %s: %w", orderID, err)
	}
	if order.Status == StatusShipped {
		return ErrAlreadyShipped
	}
	return s.repo.UpdateStatus(ctx, orderID, StatusCancelled)
}""",
    ),
    CodeMemory(
        "c04",
        "code",
        """-- migrations/0042_add_refund_reason.sql
ALTER TABLE payment_refunds ADD COLUMN refund_reason text NOT NULL DEFAULT 'customer_request';
CREATE INDEX idx_payment_refunds_created_at ON payment_refunds (created_at);""",
    ),
    CodeMemory(
        "c05",
        "code",
        """# config/rate_limits.yaml
checkout:
  maxRequestsPerMinute: 120
  burstSize: 20
webhooks:
  maxRequestsPerMinute: 600""",
    ),
    CodeMemory(
        "c06",
        "code",
        """Traceback (most recent call last):
  File "services/inventory/reserve.py", line 88, in reserve_stock
    sku = self.sku_cache[item.sku_code]
KeyError: 'SKU-4471'""",
    ),
    CodeMemory(
        "c07",
        "code",
        """class JwtTokenValidator:
    def __init__(self, public_key_pem: str, audience: str) -> None:
        self._key = public_key_pem
        self._audience = audience

    def validate(self, token: str) -> Claims:
        claims = jwt.decode(token, self._key, algorithms=["RS256"], audience=self._audience)
        if claims["exp"] < time.time():
            raise TokenExpired()
        return Claims(**claims)""",
    ),
    CodeMemory(
        "c08",
        "code",
        "$ docker compose -f deploy/docker-compose.staging.yml up -d --build api worker",
    ),
    CodeMemory(
        "c09",
        "code",
        """--- a/src/notifications/emailSender.ts
+++ b/src/notifications/emailSender.ts
-  const MAX_BATCH = 100;
+  const MAX_BATCH = 50; // SES throttles above 50 recipients per call""",
    ),
    CodeMemory(
        "c10",
        "code",
        """def test_apply_discount_caps_at_fifty_percent():
    cart = Cart(items=[Item(price_cents=1000)])
    apply_discount(cart, percent=80)
    assert cart.total_cents == 500""",
    ),
    CodeMemory(
        "c11",
        "code",
        """pub fn parse_currency_amount(input: &str) -> Result<Cents, ParseError> {
    let trimmed = input.trim().trim_start_matches('$');
    let value: f64 = trimmed.parse().map_err(|_| ParseError::NotANumber)?;
    Ok(Cents((value * 100.0).round() as i64))
}""",
    ),
    CodeMemory(
        "c12",
        "code",
        """SELECT customer_id, SUM(amount_cents) AS lifetime_value
FROM orders WHERE status = 'paid'
GROUP BY customer_id ORDER BY lifetime_value DESC LIMIT 100;""",
    ),
    CodeMemory(
        "c13",
        "code",
        """@router.post("/webhooks/stripe")
async def handle_stripe_webhook(request: Request) -> Response:
    payload = await request.body()
    event = stripe.Webhook.construct_event(
        payload, request.headers["Stripe-Signature"], WEBHOOK_SECRET
    )
    await enqueue_payment_event(event)
    return Response(status_code=204)""",
    ),
    CodeMemory(
        "c14",
        "code",
        """# deploy/nginx/api.conf
location /api/ {
    proxy_pass http://api_upstream;
    proxy_read_timeout 30s;
    client_max_body_size 10m;
}""",
    ),
    CodeMemory(
        "c15",
        "code",
        """export function OrderStatusBadge({ status }: { status: OrderStatus }) {
  const color = status === "shipped" ? "green" : status === "cancelled" ? "red" : "gray";
  return <span className={`badge badge-${color}`}>{status}</span>;
}""",
    ),
    CodeMemory(
        "c16",
        "code",
        """@dataclass(frozen=True)
class ShippingQuote:
    carrier: str
    service_level: str
    price_cents: int
    estimated_days: int""",
    ),
    CodeMemory(
        "c17",
        "code",
        """test-integration:
	DATABASE_URL=postgresql://localhost/shop_test pytest -m integration tests/integration""",
    ),
    CodeMemory(
        "c18",
        "code",
        "2026-11-03T10:14:07Z ERROR payment-worker: idempotency key collision for charge "
        "ch_93kd (IdempotencyConflictError) on POST /v1/charges",
    ),
    CodeMemory(
        "c19",
        "code",
        """def compute_sales_tax(subtotal_cents: int, region_code: str) -> int:
    rate = TAX_RATES.get(region_code, DEFAULT_TAX_RATE)
    return round(subtotal_cents * rate)""",
    ),
    CodeMemory(
        "c20",
        "code",
        """func NewRedisCache(addr string, ttl time.Duration) *RedisCache {
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 20})
	return &RedisCache{client: client, ttl: ttl}
}""",
    ),
    CodeMemory(
        "c21",
        "code",
        """export function useDebouncedSearch(query: string, delayMs = 300) {
  const [debounced, setDebounced] = useState(query);
  useEffect(() => {
    const t = setTimeout(() => setDebounced(query), delayMs);
    return () => clearTimeout(t);
  }, [query, delayMs]);
  return debounced;
}""",
    ),
    CodeMemory(
        "c22",
        "code",
        """class InventoryItem(Base):
    __tablename__ = "inventory_items"
    sku_code = Column(String(32), primary_key=True)
    quantity_on_hand = Column(Integer, nullable=False, default=0)
    warehouse_id = Column(ForeignKey("warehouses.id"))""",
    ),
    CodeMemory(
        "c23",
        "code",
        """FROM python:3.12-slim
RUN pip install --no-cache-dir -r requirements.txt
CMD ["gunicorn", "shop.wsgi:application", "--workers", "4", "--bind", "0.0.0.0:8000"]""",
    ),
    CodeMemory(
        "c24",
        "code",
        """# .github/workflows/ci.yml
jobs:
  lint:
    runs-on: ubuntu-latest
    steps:
      - run: ruff check src/ && mypy src/""",
    ),
    CodeMemory(
        "c25",
        "code",
        """def hash_password(plain: str) -> str:
    return bcrypt.hashpw(plain.encode(), bcrypt.gensalt(rounds=12)).decode()""",
    ),
    CodeMemory(
        "c26",
        "code",
        """public class InvoicePdfRenderer {
    public byte[] renderInvoice(Invoice invoice) throws RenderException {
        Template tpl = templateEngine.getTemplate("invoice.html");
        return pdfConverter.convert(tpl.render(invoice.toModel()));
    }
}""",
    ),
    CodeMemory(
        "c27",
        "code",
        """CELERY_BEAT_SCHEDULE = {
    "expire-abandoned-carts": {
        "task": "carts.tasks.expire_abandoned_carts",
        "schedule": crontab(minute="*/15"),
    },
}""",
    ),
    CodeMemory(
        "c28",
        "code",
        """if feature_flags.is_enabled("new_checkout_flow", user_id=user.id):
    return render_checkout_v2(request, cart)
return render_checkout(request, cart)""",
    ),
    CodeMemory(
        "c29",
        "code",
        "src/orders/orderTotals.ts(42,17): error TS2345: Argument of type 'string | undefined' "
        "is not assignable to parameter of type 'string'.",
    ),
    CodeMemory(
        "c30",
        "code",
        """resources:
  limits:
    memory: "512Mi"
    cpu: "500m"
livenessProbe:
  httpGet: { path: /healthz, port: 8000 }""",
    ),
    CodeMemory(
        "c31",
        "code",
        """def paginate(query, page_size: int = 50, cursor: str | None = None):
    if cursor:
        query = query.filter(Order.id > decode_cursor(cursor))
    rows = query.order_by(Order.id).limit(page_size + 1).all()
    next_cursor = encode_cursor(rows[-1].id) if len(rows) > page_size else None
    return rows[:page_size], next_cursor""",
    ),
    CodeMemory(
        "c32",
        "code",
        """func TestCancelOrder_AlreadyShipped(t *testing.T) {
	svc := newTestOrderService(t, Order{ID: "o-1", Status: StatusShipped})
	err := svc.CancelOrder(context.Background(), "o-1")
	if !errors.Is(err, ErrAlreadyShipped) {
		t.Fatalf("want ErrAlreadyShipped, got %v", err)
	}
}""",
    ),
    CodeMemory(
        "c33",
        "code",
        """# .env.example
PAYMENT_PROVIDER_API_KEY=
S3_BUCKET_INVOICES=shop-invoices-prod
SENTRY_DSN=""",
    ),
    CodeMemory(
        "c34",
        "code",
        """LOGGING = {
    "version": 1,
    "handlers": {"json": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"level": "INFO", "handlers": ["json"]},
}""",
    ),
    CodeMemory(
        "c35",
        "code",
        """type Query {
  orderById(id: ID!): Order
  ordersByCustomer(customerId: ID!, first: Int = 20, after: String): OrderConnection!
}""",
    ),
    CodeMemory(
        "c36",
        "code",
        """EMAIL_PATTERN = re.compile(r"^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$", re.IGNORECASE)

def is_valid_email(address: str) -> bool:
    return bool(EMAIL_PATTERN.match(address))""",
    ),
    # -- the project's chatter around the code -------------------------------------------
    CodeMemory("t01", "text", "We agreed to cap discounts at 50% after the Black Friday incident."),
    CodeMemory(
        "t02",
        "text",
        "The payments team says Stripe webhooks sometimes arrive twice, so every handler "
        "has to be idempotent.",
    ),
    CodeMemory(
        "t03",
        "text",
        "The staging deploy failed yesterday because the worker image was stale; rebuilt it.",
    ),
    CodeMemory(
        "t04", "text", "Alice owns the inventory service; Bob is on call for payments this week."
    ),
    CodeMemory(
        "t05",
        "text",
        "Customers keep asking why an order cannot be cancelled after it ships; support "
        "wants a clearer message.",
    ),
    CodeMemory(
        "t06",
        "text",
        "Decided to move session tokens to RS256 so the gateway can verify them with the "
        "public key only.",
    ),
    CodeMemory(
        "t07",
        "text",
        "Email notifications were throttled by SES last Monday; we should send smaller batches.",
    ),
    CodeMemory(
        "t08",
        "text",
        "Sales tax rules differ per region; finance will send the new rate table next week.",
    ),
    CodeMemory(
        "t09",
        "text",
        "The user profile page is slow because it fetches the user twice on load.",
    ),
    CodeMemory(
        "t10",
        "text",
        "We should page the order history instead of loading every order at once.",
    ),
    CodeMemory(
        "t11",
        "text",
        "Inventory counts drifted in the Berlin warehouse; a recount is planned for Friday.",
    ),
    CodeMemory(
        "t12",
        "text",
        "Refunds now need a reason for the accounting export; customer request is the default.",
    ),
    CodeMemory(
        "t13",
        "text",
        "The checkout rate limit was too strict during the sale and blocked real customers.",
    ),
    CodeMemory(
        "t14",
        "text",
        "Carol prefers squash merges and wants lint to pass before anyone asks for a review.",
    ),
    CodeMemory(
        "t15",
        "text",
        "The new checkout flow is rolled out to ten percent of users behind a flag.",
    ),
    CodeMemory(
        "t16",
        "text",
        "Invoices should look like the printed ones the accountants are used to.",
    ),
    CodeMemory(
        "t17",
        "text",
        "Shipping quotes from the second carrier are often a day optimistic.",
    ),
    CodeMemory(
        "t18",
        "text",
        "Abandoned carts pile up; marketing wants them kept for a day before they expire.",
    ),
    CodeMemory(
        "t19",
        "text",
        "Search on the catalogue fires a request on every keystroke; it needs a small delay.",
    ),
    CodeMemory(
        "t20",
        "text",
        "Passwords must never be logged, not even hashed ones, says security.",
    ),
    CodeMemory(
        "t21",
        "text",
        "Our best customers get early access to the winter collection.",
    ),
    CodeMemory(
        "t22",
        "text",
        "The API pods were killed twice last night; memory usage spikes during the export.",
    ),
    CodeMemory(
        "t23",
        "text",
        "Uploads of product photos above ten megabytes fail with a 413 from the proxy.",
    ),
    CodeMemory(
        "t24",
        "text",
        "We log in JSON now so the log shipper can parse fields without regexes.",
    ),
    CodeMemory(
        "t25",
        "text",
        "A customer typed their price with a dollar sign and the form rejected it.",
    ),
    CodeMemory(
        "t26",
        "text",
        "Order totals can be undefined for draft orders; the frontend must handle that.",
    ),
    CodeMemory(
        "t27",
        "text",
        "The status badge colours confuse colour-blind users; design will propose icons.",
    ),
    CodeMemory(
        "t28",
        "text",
        "Integration tests need their own database so they never touch the dev data.",
    ),
    CodeMemory(
        "t29",
        "text",
        "Some sign-ups have malformed email addresses; marketing's mails bounce.",
    ),
    CodeMemory(
        "t30",
        "text",
        "The GraphQL API should let a customer list their orders twenty at a time.",
    ),
)


def _q(text: str, style: str, *gold: str) -> CodeQuestion:
    return CodeQuestion(text=text, style=style, gold=frozenset(gold))


CODE_QUESTIONS: tuple[CodeQuestion, ...] = (
    # -- naming an identifier, a path or an error code ------------------------------------
    _q("What does retry_with_backoff raise when the attempts run out?", "identifier", "c01"),
    _q("Which URL does fetchUserById call?", "identifier", "c02"),
    _q(
        "What does OrderService.CancelOrder return for a shipped order?",
        "identifier",
        "c03",
        "c32",
    ),
    _q("What is the default of the refund_reason column?", "identifier", "c04"),
    _q("What is maxRequestsPerMinute for webhooks?", "identifier", "c05"),
    _q("Why did reserve_stock throw a KeyError?", "identifier", "c06"),
    _q("Which algorithms does JwtTokenValidator accept?", "identifier", "c07"),
    _q("How do we start deploy/docker-compose.staging.yml?", "identifier", "c08"),
    _q("Why was MAX_BATCH lowered in emailSender.ts?", "identifier", "c09"),
    _q("What does test_apply_discount_caps_at_fifty_percent check?", "identifier", "c10"),
    _q("When does parse_currency_amount return ParseError::NotANumber?", "identifier", "c11"),
    _q("How is lifetime_value computed per customer_id?", "identifier", "c12"),
    _q("How does handle_stripe_webhook check the Stripe-Signature header?", "identifier", "c13"),
    _q("What proxy_read_timeout is set in api.conf?", "identifier", "c14"),
    _q("Which colour does OrderStatusBadge use for cancelled orders?", "identifier", "c15"),
    _q("What fields does ShippingQuote have besides estimated_days?", "identifier", "c16"),
    _q("What caused the IdempotencyConflictError on /v1/charges?", "identifier", "c18"),
    _q("Where did the TS2345 error in orderTotals.ts come from?", "identifier", "c29"),
    _q("What PoolSize does NewRedisCache configure?", "identifier", "c20"),
    _q("What is the default delayMs of useDebouncedSearch?", "identifier", "c21"),
    _q("Which table holds quantity_on_hand?", "identifier", "c22"),
    _q("How often does expire_abandoned_carts run?", "identifier", "c27"),
    _q("What does the new_checkout_flow flag switch?", "identifier", "c28"),
    _q("What is S3_BUCKET_INVOICES set to?", "identifier", "c33"),
    _q("What arguments does ordersByCustomer take?", "identifier", "c35"),
    # -- describing the behaviour in words -------------------------------------------------
    _q(
        "How many times do we retry a failing call, and how long do we wait between tries?",
        "natural",
        "c01",
    ),
    _q(
        "What happens when someone cancels an order that has already shipped?",
        "natural",
        "c03",
        "c32",
    ),
    _q("How are user passwords stored?", "natural", "c25"),
    _q("What tax rate applies to a region we have no rate for?", "natural", "c19"),
    _q("How are invoices turned into PDF files?", "natural", "c26"),
    _q("What memory limit does the API pod have?", "natural", "c30"),
    _q("How do we page through a long list of orders?", "natural", "c31"),
    _q("Which checks run in CI to catch lint and type errors?", "natural", "c24"),
    _q("How many web server workers does the container start?", "natural", "c23"),
    _q("How do we check that an email address is well formed?", "natural", "c36"),
    _q("What format do our logs use?", "natural", "c34"),
    _q("How is the integration test suite run against its own database?", "natural", "c17"),
    _q("How do we turn a price like $12.50 typed by a user into cents?", "natural", "c11"),
    _q("Who are our most valuable customers by total spend?", "natural", "c12"),
    _q("How large can a request body to the API be?", "natural", "c14"),
)
