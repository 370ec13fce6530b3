//! The offline model's A2UI: it calls `generate_a2ui` when asked for a view, and answers the
//! generator's forced `render_a2ui` call with one of three canned surfaces (hotels, products,
//! a team), drawn with the dojo's card components when the catalog in the prompt has them and
//! with A2UI's basic components otherwise.
//!
//! To show recovery without a real model, a request about *luxury* hotels gets an invalid
//! tree first (its repeated card is never defined) and a valid one once told what was wrong;
//! one about *broken* hotels never gets a valid tree.

use serde_json::{json, Value};

use super::{ChatMessage, ChatRequest, ToolSpec, UserPart};

/// Words that ask for a view rather than an answer in text.
const VIEW_WORDS: &[&str] = &[
    "compare",
    "comparison",
    "show",
    "display",
    "roster",
    "directory",
    "dashboard",
    "cards",
];

/// The generator, when it is offered and the text asks for a view.
pub(super) fn view_asked<'a>(tools: &'a [ToolSpec], user_text: &str) -> Option<&'a ToolSpec> {
    let lower = user_text.to_ascii_lowercase();
    let asked = VIEW_WORDS
        .iter()
        .any(|word| super::contains_word(&lower, word));
    tools
        .iter()
        .find(|tool| tool.name == "generate_a2ui")
        .filter(|_| asked)
}

/// The arguments of a forced call of an A2UI render tool (one with a `components` argument).
pub(super) fn render_arguments(request: &ChatRequest, tool: &ToolSpec) -> Option<Value> {
    tool.parameters.pointer("/properties/components")?;
    let system = request.messages.iter().find_map(|m| match m {
        ChatMessage::System { content } => Some(content.as_str()),
        _ => None,
    })?;
    let asked: String = request
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User { content } => Some(content),
            _ => None,
        })
        .flatten()
        .filter_map(|part| match part {
            UserPart::Text(text) => Some(text.to_ascii_lowercase()),
            UserPart::ImageUrl { .. } => None,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let retried = system.contains("Previous attempt was invalid");
    let broken = asked.contains("broken") || (asked.contains("luxury") && !retried);
    let cards = system.contains("HotelCard");
    let (surface_id, card, items_key, items) =
        if ["headphone", "product"].iter().any(|w| asked.contains(w)) {
            (
                "product-comparison",
                product_card(cards),
                "products",
                products(),
            )
        } else if ["team", "roster", "people", "directory"]
            .iter()
            .any(|w| asked.contains(w))
        {
            ("team-roster", team_card(cards), "members", members())
        } else {
            ("hotel-comparison", hotel_card(cards), "hotels", hotels())
        };
    let layout = if cards { "Row" } else { "Column" };
    let mut components = vec![json!({
        "id": "root",
        "component": layout,
        "children": {"componentId": "card", "path": format!("/{items_key}")},
        "gap": 16
    })];
    if !broken {
        components.extend(card);
    }
    Some(json!({
        "surfaceId": surface_id,
        "components": components,
        "data": {items_key: items},
    }))
}

/// What the offline model says after a tool result it recognises, instead of quoting it.
pub(super) fn after_result(content: &str) -> Option<&'static str> {
    if content.contains("a2ui_recovery_exhausted") {
        Some("I could not build that view this time. Ask me again, or ask for something else.")
    } else if content.contains("a2ui_operations") {
        Some("Here it is.")
    } else {
        None
    }
}

fn bound(field: &str) -> Value {
    json!({"path": field})
}

/// A card template: the dojo's component when the catalog has it, else a basic Card with a
/// Column of Texts.
fn card(cards: bool, component: Value, lines: &[&str]) -> Vec<Value> {
    if cards {
        return vec![component];
    }
    let texts: Vec<String> = (0..lines.len()).map(|i| format!("card-line-{i}")).collect();
    let mut basic = vec![
        json!({"id": "card", "component": "Card", "child": "card-body"}),
        json!({"id": "card-body", "component": "Column", "children": texts}),
    ];
    basic.extend(lines.iter().enumerate().map(|(i, field)| {
        json!({"id": format!("card-line-{i}"), "component": "Text", "text": bound(field)})
    }));
    basic
}

fn hotel_card(cards: bool) -> Vec<Value> {
    let component = json!({
        "id": "card", "component": "HotelCard",
        "name": bound("name"), "location": bound("location"), "rating": bound("rating"),
        "pricePerNight": bound("pricePerNight"),
        "action": {"event": {"name": "book_hotel", "context": {"hotelName": bound("name")}}}
    });
    card(cards, component, &["name", "location", "pricePerNight"])
}

fn product_card(cards: bool) -> Vec<Value> {
    let component = json!({
        "id": "card", "component": "ProductCard",
        "name": bound("name"), "price": bound("price"), "rating": bound("rating"),
        "description": bound("description"),
        "action": {"event": {"name": "select_product", "context": {"product": bound("name")}}}
    });
    card(cards, component, &["name", "price", "description"])
}

fn team_card(cards: bool) -> Vec<Value> {
    let component = json!({
        "id": "card", "component": "TeamMemberCard",
        "name": bound("name"), "role": bound("role"), "department": bound("department"),
        "email": bound("email"),
        "action": {"event": {"name": "contact", "context": {"email": bound("email")}}}
    });
    card(cards, component, &["name", "role", "email"])
}

fn hotels() -> Value {
    json!([
        {"name": "The Ritz", "location": "Paris", "rating": 4.8, "pricePerNight": "$450/night"},
        {"name": "Holiday Inn", "location": "Chicago", "rating": 4.1, "pricePerNight": "$180/night"},
        {"name": "Boutique Loft", "location": "Lisbon", "rating": 4.6, "pricePerNight": "$320/night"}
    ])
}

fn products() -> Value {
    json!([
        {"name": "Sony WH-1000XM5", "price": "$349", "rating": 4.7, "description": "Quiet and light, with 30 hours of battery."},
        {"name": "AirPods Max", "price": "$549", "rating": 4.5, "description": "Rich sound and a solid aluminium build."},
        {"name": "Bose QC Ultra", "price": "$429", "rating": 4.6, "description": "The strongest noise cancelling of the three."}
    ])
}

fn members() -> Value {
    json!([
        {"name": "Alice Chen", "role": "Engineering Lead", "department": "Engineering", "email": "alice@example.com"},
        {"name": "Bob Martinez", "role": "Product Designer", "department": "Design", "email": "bob@example.com"},
        {"name": "Carol Davis", "role": "Data Scientist", "department": "Analytics", "email": "carol@example.com"},
        {"name": "Dan Wilson", "role": "Account Manager", "department": "Sales", "email": "dan@example.com"}
    ])
}
